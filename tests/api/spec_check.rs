//! Every response a test sees is checked against openapi.yaml: its status must be documented
//! for the operation, and its body must match the documented schema.

use std::sync::OnceLock;

use serde_json::Value;

pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let yaml: serde_yaml::Value =
            serde_yaml::from_str(chorus::api::meta::OPENAPI_YAML).expect("openapi.yaml parses");
        serde_json::to_value(yaml).expect("openapi.yaml converts to JSON")
    })
}

/// Fails the test when `status` is not documented for the operation, or the body does not
/// match the documented schema.
pub fn check_against_spec(method: &str, template: &str, status: u16, body: &Value) {
    let operation = &spec()["paths"][template][method.to_lowercase()];
    assert!(
        operation.is_object(),
        "{method} {template} is not in openapi.yaml"
    );
    let response = resolve(&operation["responses"][status.to_string()]);
    assert!(
        response.is_object(),
        "{method} {template} answered {status}, which openapi.yaml does not document: {body}"
    );
    let schema = &response["content"]["application/json"]["schema"];
    if schema.is_null() {
        assert!(
            body.is_null(),
            "{method} {template} {status}: spec says no JSON body, got {body}"
        );
        return;
    }
    let mut root = schema.as_object().cloned().unwrap_or_default();
    root.insert("components".into(), spec()["components"].clone());
    let validator = jsonschema::draft202012::new(&Value::Object(root)).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {template} {status}: body does not match openapi.yaml: {errors:?}\nbody: {body}"
    );
}

/// Fails the test when `value` does not match the schema `#/components/schemas/<name>`.
pub fn check_against_schema(name: &str, value: &Value) {
    let schema = &spec()["components"]["schemas"][name];
    assert!(schema.is_object(), "openapi.yaml has no schema {name}");
    let mut root = schema.as_object().cloned().unwrap_or_default();
    root.insert("components".into(), spec()["components"].clone());
    let validator = jsonschema::draft202012::new(&Value::Object(root)).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "does not match {name} of openapi.yaml: {errors:?}\nvalue: {value}"
    );
}

/// Follows a `$ref` to `#/components/...` once.
fn resolve(value: &Value) -> &Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.trim_start_matches('#');
            spec().pointer(pointer).unwrap_or(&Value::Null)
        }
        None => value,
    }
}
