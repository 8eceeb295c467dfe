//! Request bodies, strictly: a body is read as JSON by actix (content type, size and syntax
//! errors are answered as the JSON config says), then shaped into the handler's type, where
//! every mistake is a `400 validation_failed` that names the field by its path and says what
//! it accepts in JSON's words: "acks[0].group_id: must be an integer, got the string \"2\"",
//! "member_id: unknown field; the accepted fields are name, member_ids". Body types refuse
//! fields they do not know (`#[serde(deny_unknown_fields)]`): a typo is never ignored.

use std::future::Future;
use std::pin::Pin;

use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use serde::de::{self, DeserializeOwned, Deserializer, Unexpected};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::ApiError;

/// A request body of type `T`, read as described above.
pub struct JsonBody<T>(pub T);

impl<T> std::ops::Deref for JsonBody<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for JsonBody<T> {
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let raw = web::Json::<Box<RawValue>>::from_request(req, payload);
        Box::pin(async move {
            let raw = raw.await?.into_inner();
            Ok(JsonBody(shaped(raw.get())?))
        })
    }
}

/// Reads an integer field as JSON Schema counts integers: `7`, `7.0` and `7e0` alike (a client
/// whose numbers are all doubles, JavaScript's, may send any), read from the text exactly, so
/// `9007199254740993.0` is that integer and not the double nearest to it; `7.5`, or a number
/// beyond 64 bits, is refused as not an integer. For `#[serde(deserialize_with = "whole_number")]`.
pub fn whole_number<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let raw = Box::<RawValue>::deserialize(d)?;
    whole_number_in(raw.get())
}

/// [`whole_number`] for an optional field (also with `#[serde(default)]`): null is absent.
pub fn optional_whole_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    match Option::<Box<RawValue>>::deserialize(d)? {
        Some(raw) => whole_number_in(raw.get()).map(Some),
        None => Ok(None),
    }
}

/// serde's name for an i64, which [`expected_in_words`] says as "an integer".
const INTEGER: &str = "i64";

/// The integer a JSON value (its text, as written) stands for, or the error serde would give.
fn whole_number_in<E: de::Error>(json: &str) -> Result<i64, E> {
    if !json.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        let value: serde_json::Value = serde_json::from_str(json).map_err(E::custom)?;
        let found = match &value {
            serde_json::Value::String(s) => Unexpected::Str(s),
            serde_json::Value::Bool(b) => Unexpected::Bool(*b),
            serde_json::Value::Array(_) => Unexpected::Seq,
            serde_json::Value::Object(_) => Unexpected::Map,
            _ => Unexpected::Unit,
        };
        return Err(E::invalid_type(found, &INTEGER));
    }
    match whole_value(json) {
        Some(Ok(value)) => Ok(value),
        // A plain integer past i64 says so as an integer; anything else as a number, quoted
        // as the client wrote it (a double would round it, or say "inf").
        _ => match json.parse::<u64>() {
            Ok(big) => Err(E::invalid_value(Unexpected::Unsigned(big), &INTEGER)),
            Err(_) => Err(E::invalid_type(
                Unexpected::Other(&format!("floating point `{json}`")),
                &INTEGER,
            )),
        },
    }
}

/// The value of a JSON number's text when it is whole: `Some(Ok)` within i64, `Some(Err)`
/// beyond it, `None` when it has a fraction. Worked out in decimal digits, never in a double.
fn whole_value(number: &str) -> Option<Result<i64, ()>> {
    let (negative, unsigned) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent),
        None => (unsigned, "0"),
    };
    let (whole_part, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole_part}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(Ok(0));
    }
    // An exponent too large for i64 is too large for any id, or too small to be whole.
    let Ok(exponent) = exponent.trim_start_matches('+').parse::<i64>() else {
        return match exponent.starts_with('-') {
            true => None,
            false => Some(Err(())),
        };
    };
    let scale = exponent.saturating_sub(fraction.len() as i64);
    let digits = if scale < 0 {
        let dropped = usize::try_from(scale.unsigned_abs()).unwrap_or(usize::MAX);
        let kept = digits.len().checked_sub(dropped)?;
        if digits[kept..].bytes().any(|b| b != b'0') {
            return None;
        }
        digits[..kept].to_owned()
    } else {
        // i64 has 19 digits: more is out of range (the leading digit is not 0).
        match usize::try_from(scale) {
            Ok(zeros) if digits.len().saturating_add(zeros) <= 19 => {
                format!("{digits}{}", "0".repeat(zeros))
            }
            _ => return Some(Err(())),
        }
    };
    // Digits left past i128 (a long integer written with a fraction of zeros) are out of range.
    let Ok(magnitude) = digits.parse::<i128>() else {
        return Some(Err(()));
    };
    let value = if negative { -magnitude } else { magnitude };
    Some(i64::try_from(value).map_err(|_| ()))
}

/// The body, JSON already, as a `T`: an object, whose fields are checked by `T`.
fn shaped<T: DeserializeOwned>(json: &str) -> Result<T, ApiError> {
    // serde would take an array for an object, its items as the fields in order.
    if let Some(kind) = not_an_object(json) {
        return Err(ApiError::Validation(format!(
            "the body: must be an object, got {kind}"
        )));
    }
    let mut reader = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut reader)
        .map_err(|e| ApiError::Validation(in_the_clients_words(&e)))
}

/// What the body is, when it is not an object (it is valid JSON).
fn not_an_object(json: &str) -> Option<&'static str> {
    match json.trim_start().chars().next() {
        Some('{') => None,
        Some('[') => Some("an array"),
        Some('"') => Some("a string"),
        Some('t' | 'f') => Some("true or false"),
        Some('n') => Some("null"),
        _ => Some("a number"),
    }
}

/// What was wrong with a body that is JSON but not of the expected shape.
fn in_the_clients_words(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    let at_root = path == ".";
    let message = without_position(&e.inner().to_string());
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (field, accepted) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let field = unquote(field);
        // serde says "`a`", "`a` or `b`", "one of `a`, `b`, `c`" or "there are no fields".
        let accepted = accepted
            .trim_start_matches("one of ")
            .trim_start_matches("there are no fields")
            .replace("` or `", "`, `");
        let accepted = accepted
            .split(", ")
            .filter(|name| !name.is_empty())
            .map(unquote)
            .collect::<Vec<_>>()
            .join(", ");
        let path = if at_root { field.to_owned() } else { path };
        return match accepted.is_empty() {
            true => format!("{path}: unknown field; this object takes no fields"),
            false => format!("{path}: unknown field; the accepted fields are {accepted}"),
        };
    }
    if let Some(field) = message.strip_prefix("missing field ") {
        let field = unquote(field);
        return match at_root {
            true => format!("{field}: required"),
            false => format!("{path}.{field}: required"),
        };
    }
    let (got, expected) = match message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|m| m.split_once(", expected "))
    {
        Some(pair) => pair,
        None => return format!("{}: {message}", if at_root { "body" } else { &path }),
    };
    let subject = if at_root { "the body" } else { &path };
    format!(
        "{subject}: must be {}, got {}",
        expected_in_words(expected),
        got_in_words(got)
    )
}

/// serde_json's message without its " at line 1 column 9" tail.
fn without_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

fn unquote(s: &str) -> &str {
    s.trim().trim_matches('`')
}

/// serde's name of the expected type as JSON says it.
fn expected_in_words(expected: &str) -> &str {
    match expected {
        "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" | "isize" => {
            "an integer"
        }
        "f32" | "f64" => "a number",
        "a string" | "a borrowed string" | "a char" => "a string",
        "a boolean" => "true or false",
        "a sequence" => "an array",
        "a map" => "an object",
        "any valid JSON value" => "a JSON value",
        other if other.starts_with("struct ") => "an object",
        other => other,
    }
}

/// serde's description of the value found, as JSON says it.
fn got_in_words(got: &str) -> String {
    let (kind, value) = match got.split_once(' ') {
        Some((kind, value)) => (kind, value.trim_matches('`')),
        None => (got, ""),
    };
    match kind {
        "integer" => format!("the integer {value}"),
        "floating" => format!(
            "the number {}",
            value.trim_start_matches("point ").trim_matches('`')
        ),
        "string" => format!("the string {value}"),
        "boolean" => value.to_owned(),
        "sequence" => "an array".to_owned(),
        "map" => "an object".to_owned(),
        "unit" | "null" => "null".to_owned(),
        _ => got.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::shaped;
    use crate::api::error::ApiError;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        #[serde(default)]
        member_ids: Vec<String>,
        items: Option<Vec<Item>>,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        #[serde(deserialize_with = "super::whole_number")]
        group_id: i64,
        #[serde(default, deserialize_with = "super::optional_whole_number")]
        read: Option<i64>,
        flag: Option<bool>,
    }

    fn words(json: &str) -> String {
        match shaped::<Body>(json) {
            Err(ApiError::Validation(message)) => message,
            other => panic!("{json} refused as validation_failed, not {other:?}"),
        }
    }

    #[test]
    fn an_integer_may_be_written_as_a_whole_number_with_a_fraction_of_zero() {
        for (json, group_id, read) in [
            (
                r#"{"name":"a","items":[{"group_id":7503430.0}]}"#,
                7503430,
                None,
            ),
            (
                r#"{"name":"a","items":[{"group_id":7,"read":2.0}]}"#,
                7,
                Some(2),
            ),
            (
                r#"{"name":"a","items":[{"group_id":-1e3,"read":null}]}"#,
                -1000,
                None,
            ),
            // Read from the text, not through a double: each is exactly the integer written.
            (
                r#"{"name":"a","items":[{"group_id":3918637841708650.0,"read":2251799813685247.0}]}"#,
                3918637841708650,
                Some(2251799813685247),
            ),
            (
                r#"{"name":"a","items":[{"group_id":9007199254740993.0,"read":9223372036854775807.000}]}"#,
                9007199254740993,
                Some(i64::MAX),
            ),
            (
                r#"{"name":"a","items":[{"group_id":-9223372036854775808.0,"read":12.30e1}]}"#,
                i64::MIN,
                Some(123),
            ),
            (
                r#"{"name":"a","items":[{"group_id":0.0e-7,"read":150E-1}]}"#,
                0,
                Some(15),
            ),
        ] {
            let body = shaped::<Body>(json).expect("accepted");
            let item = &body.items.expect("items")[0];
            assert_eq!((item.group_id, item.read), (group_id, read), "{json}");
        }
    }

    #[test]
    fn a_number_that_is_no_integer_or_out_of_range_is_refused_in_words() {
        for (json, said) in [
            (
                r#"{"name":"a","items":[{"group_id":1,"read":2.5}]}"#,
                "items[0].read: must be an integer, got the number 2.5",
            ),
            (
                r#"{"name":"a","items":[{"group_id":9223372036854775808}]}"#,
                "items[0].group_id: must be an integer, got the integer 9223372036854775808",
            ),
            (
                r#"{"name":"a","items":[{"group_id":1e300}]}"#,
                "items[0].group_id: must be an integer, got the number 1e300",
            ),
            (
                r#"{"name":"a","items":[{"group_id":3918637841708649.5}]}"#,
                "items[0].group_id: must be an integer, got the number 3918637841708649.5",
            ),
            (
                r#"{"name":"a","items":[{"group_id":9223372036854775808.0}]}"#,
                "items[0].group_id: must be an integer, got the number 9223372036854775808.0",
            ),
            (
                r#"{"name":"a","items":[{"group_id":1,"read":true}]}"#,
                "items[0].read: must be an integer, got true",
            ),
            (
                r#"{"name":"a","items":[{"group_id":null}]}"#,
                "items[0].group_id: must be an integer, got null",
            ),
            (
                r#"{"name":"a","items":[{"group_id":[1]}]}"#,
                "items[0].group_id: must be an integer, got an array",
            ),
        ] {
            assert_eq!(words(json), said, "for {json}");
        }
    }

    #[test]
    fn a_whole_value_is_worked_out_from_the_digits() {
        use super::whole_value;
        for (text, value) in [
            ("-0", Some(Ok(0))),
            ("-0.0e-7", Some(Ok(0))),
            ("1E+2", Some(Ok(100))),
            ("150E-1", Some(Ok(15))),
            ("0.05e1", None),
            ("10e-2", None),
            ("1e-99999999999999999999", None),
            ("1e99999999999999999999", Some(Err(()))),
            (
                "123456789012345678901234567890123456789012345.000",
                Some(Err(())),
            ),
            ("-9223372036854775809", Some(Err(()))),
            ("9223372036854775807e0", Some(Ok(i64::MAX))),
        ] {
            assert_eq!(whole_value(text), value, "{text}");
        }
    }

    #[test]
    fn each_mistake_names_the_field_and_what_it_accepts_in_json_words() {
        for (json, said) in [
            (
                r#"{"name":"a","member_id":["b"]}"#,
                "member_id: unknown field; the accepted fields are name, member_ids, items",
            ),
            (r#"{"member_ids":[]}"#, "name: required"),
            (r#"{"name":1}"#, "name: must be a string, got the integer 1"),
            (r#"[1,2]"#, "the body: must be an object, got an array"),
            (r#""text""#, "the body: must be an object, got a string"),
            ("7", "the body: must be an object, got a number"),
            (
                r#"{"name":"a","member_ids":"b"}"#,
                r#"member_ids: must be an array, got the string "b""#,
            ),
            (
                r#"{"name":"a","items":[{"group_id":"2"}]}"#,
                r#"items[0].group_id: must be an integer, got the string "2""#,
            ),
            (
                r#"{"name":"a","items":[{"group_id":1.5}]}"#,
                "items[0].group_id: must be an integer, got the number 1.5",
            ),
            (
                r#"{"name":"a","items":[{"group_id":1,"flag":"yes"}]}"#,
                r#"items[0].flag: must be true or false, got the string "yes""#,
            ),
            (
                r#"{"name":"a","items":[{"group_id":1,"x":0}]}"#,
                "items[0].x: unknown field; the accepted fields are group_id, read, flag",
            ),
            (
                r#"{"name":"a","items":[{}]}"#,
                "items[0].group_id: required",
            ),
        ] {
            assert_eq!(words(json), said, "for {json}");
        }
    }
}
