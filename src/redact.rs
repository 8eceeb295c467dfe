//! Secrets kept out of logs: a database URL's password.

/// The URL with its password (if it has one) replaced by `***`, for logs. A password can sit
/// in the user info (`postgres://user:pass@host/db`) or, for libpq, in a `password=` query
/// parameter; a URL without either, and a SQLite path, come back unchanged.
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(url) => redact_parsed(url).unwrap_or_else(|| raw.to_owned()),
        // Not a URL (a SQLite path), or one too broken to parse that libpq might still read:
        // hide everything that could be user info.
        Err(_) => match (raw.find("://"), raw.rfind('@')) {
            (Some(scheme_end), Some(at)) if at > scheme_end => {
                format!("{}://***@{}", &raw[..scheme_end], &raw[at + 1..])
            }
            _ => raw.to_owned(),
        },
    }
}

/// The redacted URL, or None when it holds no password.
fn redact_parsed(mut url: url::Url) -> Option<String> {
    let in_query = url.query_pairs().any(|(key, _)| key == "password");
    if url.password().is_none() && !in_query {
        return None;
    }
    if url.password().is_some() {
        // Only fails for URLs that cannot have a password, which this one has.
        url.set_password(Some("***")).ok()?;
    }
    if in_query {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "password" { "***".into() } else { v };
                (k.into_owned(), v.into_owned())
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    Some(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_a_password_in_user_info_or_query() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(
            redact_url("postgres://u@h/db?sslmode=require&password=secret"),
            "postgres://u@h/db?sslmode=require&password=***"
        );
        assert_eq!(redact_url("postgres://u:p#ss@h/db"), "postgres://***@h/db");
    }

    #[test]
    fn redact_url_leaves_urls_without_a_password_alone() {
        let no_password = "postgres://postgres@127.0.0.1:5432/chorus";
        assert_eq!(redact_url(no_password), no_password);
        assert_eq!(redact_url("chorus-data/x.sqlite3"), "chorus-data/x.sqlite3");
    }
}
