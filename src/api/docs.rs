//! `/docs`: openapi.yaml rendered as a readable HTML reference, on the server, with no
//! script and no outside asset, so it works offline. Rendered once, on first request.

use std::fmt::Write;
use std::sync::OnceLock;

use actix_web::HttpResponse;
use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use serde_json::Value;

use super::meta::OPENAPI_YAML;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];
const STYLE: &str = "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1d2330}\
h1{margin-bottom:0}h2{border-bottom:1px solid #ddd;margin-top:2.5rem}\
.op{border:1px solid #e2e5ea;border-radius:8px;padding:.2rem 1rem 1rem;margin:1.2rem 0}\
.verb{font:600 13px monospace;padding:2px 8px;border-radius:4px;color:#fff;margin-right:.5rem}\
.get{background:#2f7d4f}.post{background:#2c5fa8}.delete{background:#b23b3b}.put,.patch{background:#8a5a00}\
code,pre{font:13px/1.45 ui-monospace,monospace;background:#f4f5f7;border-radius:4px}\
code{padding:1px 4px}pre{padding:.7rem;overflow-x:auto}\
table{border-collapse:collapse;width:100%;margin:.5rem 0}td,th{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;vertical-align:top}\
td p{margin:.2rem 0}nav a{margin-right:1rem}.muted{color:#667}";

pub async fn docs() -> HttpResponse {
    static PAGE: OnceLock<String> = OnceLock::new();
    let page = PAGE.get_or_init(|| match serde_yaml::from_str::<Value>(OPENAPI_YAML) {
        Ok(spec) => render(&spec),
        Err(e) => format!(
            "<p>openapi.yaml could not be read: {}</p>",
            escape(&e.to_string())
        ),
    });
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(page.clone())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A description from the spec as HTML, by pulldown-cmark (CommonMark, plus tables).
/// Whatever a description says, the page stays free of scripts and outside assets: raw HTML
/// is shown as text, an image as its alt text, and a link whose destination could run
/// something (`javascript:`, `data:`) as its text. Headings move one level down, below the
/// page's own `<h2>` sections.
fn markdown(text: &str) -> String {
    let mut in_unsafe_link = false;
    let events = Parser::new_ext(text, Options::ENABLE_TABLES).filter_map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Some(Event::Text(raw)),
        Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => None,
        Event::Start(Tag::Link { ref dest_url, .. }) if !is_safe_link(dest_url) => {
            in_unsafe_link = true;
            None
        }
        Event::End(TagEnd::Link) if in_unsafe_link => {
            in_unsafe_link = false;
            None
        }
        Event::Start(Tag::Heading {
            level,
            id,
            classes,
            attrs,
        }) => Some(Event::Start(Tag::Heading {
            level: one_level_down(level),
            id,
            classes,
            attrs,
        })),
        Event::End(TagEnd::Heading(level)) => {
            Some(Event::End(TagEnd::Heading(one_level_down(level))))
        }
        other => Some(other),
    });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

fn one_level_down(level: HeadingLevel) -> HeadingLevel {
    HeadingLevel::try_from(level as usize + 1).unwrap_or(HeadingLevel::H6)
}

/// Links within the page or the server, and to web and mail addresses; nothing a browser
/// would run.
fn is_safe_link(destination: &str) -> bool {
    let scheme_end = destination.find([':', '/', '?', '#']);
    match scheme_end {
        Some(i) if destination[i..].starts_with(':') => {
            let scheme = destination[..i].to_ascii_lowercase();
            matches!(scheme.as_str(), "http" | "https" | "mailto")
        }
        _ => true,
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The name of a `$ref`'d schema, or a short description of an inline one.
fn type_name(schema: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("<a href=\"#schema-{name}\">{name}</a>");
    }
    // A choice between schemas (a body of several kinds, a value or null) names each one; a
    // single `allOf` is how a field adds a description to a named schema.
    for (key, join) in [("oneOf", " | "), ("anyOf", " | "), ("allOf", " & ")] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            return branches
                .iter()
                .map(type_name)
                .collect::<Vec<_>>()
                .join(join);
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) if t == "array" => {
            format!("array of {}", type_name(&schema["items"]))
        }
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" | "),
        _ => "object".into(),
    }
}

fn resolve<'a>(spec: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => spec.pointer(r.trim_start_matches('#')).unwrap_or(v),
        None => v,
    }
}

fn example_of(media: &Value) -> Option<String> {
    let example = media.get("example").or_else(|| {
        media
            .get("examples")
            .and_then(|e| e.as_object()?.values().next()?.get("value"))
    })?;
    Some(match example {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    })
}

fn render(spec: &Value) -> String {
    let info = &spec["info"];
    let mut html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title} API</title>\
         <style>{STYLE}</style></head><body><h1>{title} API <span class=\"muted\">{version}</span></h1>\
         <nav><a href=\"/openapi.yaml\">openapi.yaml</a><a href=\"/\">web client</a><a href=\"#schemas\">schemas</a></nav>{desc}",
        title = escape(str_of(info, "title")),
        version = escape(str_of(info, "version")),
        desc = markdown(str_of(info, "description")),
    );
    html.push_str("<h2>Operations</h2>");
    if let Some(paths) = spec["paths"].as_object() {
        for (path, item) in paths {
            for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
                render_operation(&mut html, spec, path, method, &item[*method]);
            }
        }
    }
    // Requests Chorus makes (to the push service), documented as OpenAPI 3.1 webhooks.
    if let Some(hooks) = spec["webhooks"].as_object().filter(|h| !h.is_empty()) {
        html.push_str("<h2 id=\"webhooks\">Webhooks: requests Chorus makes</h2>");
        for (name, item) in hooks {
            for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
                render_operation(&mut html, spec, name, method, &item[*method]);
            }
        }
    }
    html.push_str("<h2 id=\"schemas\">Schemas</h2>");
    if let Some(schemas) = spec["components"]["schemas"].as_object() {
        for (name, schema) in schemas {
            render_schema(&mut html, name, schema);
        }
    }
    html.push_str("</body></html>");
    html
}

fn render_operation(html: &mut String, spec: &Value, path: &str, method: &str, op: &Value) {
    let public = op["security"].as_array().is_some_and(|s| s.is_empty());
    let _ = write!(
        html,
        "<div class=\"op\" id=\"{id}\"><h3><span class=\"verb {method}\">{verb}</span><code>{path}</code></h3>\
         <p><strong>{summary}</strong>{auth}</p>{desc}",
        id = escape(str_of(op, "operationId")),
        verb = method.to_uppercase(),
        path = escape(path),
        summary = escape(str_of(op, "summary")),
        auth = if public { " <span class=\"muted\">(no token)</span>" } else { "" },
        desc = markdown(str_of(op, "description")),
    );
    render_parameters(html, spec, op);
    render_request_body(html, op);
    render_responses(html, spec, op);
    html.push_str("</div>");
}

fn render_parameters(html: &mut String, spec: &Value, op: &Value) {
    let Some(params) = op["parameters"].as_array().filter(|p| !p.is_empty()) else {
        return;
    };
    html.push_str("<table><tr><th>Parameter</th><th>In</th><th>Type</th><th>Description</th></tr>");
    for p in params.iter().map(|p| resolve(spec, p)) {
        let _ = write!(
            html,
            "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(str_of(p, "name")),
            if p["required"].as_bool() == Some(true) {
                " *"
            } else {
                ""
            },
            escape(str_of(p, "in")),
            type_name(&p["schema"]),
            markdown(str_of(p, "description"))
        );
    }
    html.push_str("</table>");
}

fn render_request_body(html: &mut String, op: &Value) {
    let media = &op["requestBody"]["content"]["application/json"];
    if !media.is_object() {
        return;
    }
    let _ = write!(html, "<p>Request body: {}</p>", type_name(&media["schema"]));
    if let Some(example) = example_of(media) {
        let _ = write!(html, "<pre>{}</pre>", escape(&example));
    }
}

/// The table of statuses, and the example of the success answer.
fn render_responses(html: &mut String, spec: &Value, op: &Value) {
    let Some(responses) = op["responses"].as_object() else {
        return;
    };
    html.push_str("<table><tr><th>Status</th><th>Meaning</th><th>Body</th></tr>");
    for (status, response) in responses {
        let response = resolve(spec, response);
        let body = response["content"]
            .as_object()
            .and_then(|c| c.values().next())
            .map(|m| type_name(&m["schema"]))
            .unwrap_or_default();
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(status),
            markdown(str_of(response, "description")),
            body
        );
    }
    html.push_str("</table>");
    let ok = responses.iter().find(|(s, _)| s.starts_with('2'));
    if let Some(example) =
        ok.and_then(|(_, r)| example_of(&resolve(spec, r)["content"]["application/json"]))
    {
        let _ = write!(
            html,
            "<details><summary>Example response</summary><pre>{}</pre></details>",
            escape(&example)
        );
    }
}

fn render_schema(html: &mut String, name: &str, schema: &Value) {
    let _ = write!(
        html,
        "<h3 id=\"schema-{name}\">{name}</h3>{}",
        markdown(str_of(schema, "description"))
    );
    let Some(properties) = schema["properties"].as_object() else {
        let _ = write!(html, "<p>{}</p>", type_name(schema));
        return;
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    html.push_str("<table><tr><th>Field</th><th>Type</th><th>Description</th></tr>");
    for (field, prop) in properties {
        let _ = write!(
            html,
            "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td></tr>",
            escape(field),
            if required.contains(&field.as_str()) {
                " *"
            } else {
                ""
            },
            type_name(prop),
            markdown(str_of(prop, "description"))
        );
    }
    html.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_of_schemas_names_each_branch() {
        let link = |name: &str| format!("<a href=\"#schema-{name}\">{name}</a>");
        let one_of: Value = serde_yaml::from_str(
            "oneOf: [{$ref: '#/components/schemas/A'}, {$ref: '#/components/schemas/B'}]",
        )
        .unwrap();
        assert_eq!(type_name(&one_of), format!("{} | {}", link("A"), link("B")));
        let nullable: Value =
            serde_yaml::from_str("anyOf: [{$ref: '#/components/schemas/A'}, {type: 'null'}]")
                .unwrap();
        assert_eq!(type_name(&nullable), format!("{} | null", link("A")));
    }

    #[test]
    fn markdown_renders_lists_code_emphasis_and_headings_below_the_page_sections() {
        let html = markdown("Intro with `code`.\n\n- one. Two\n  wraps\n- **two** *em*\n\n## Head");
        assert_eq!(
            html,
            "<p>Intro with <code>code</code>.</p>\n<ul>\n<li>one. Two\nwraps</li>\n\
             <li><strong>two</strong> <em>em</em></li>\n</ul>\n<h3>Head</h3>\n"
        );
    }

    #[test]
    fn bold_text_around_inline_code_stays_bold() {
        // As the spec writes it: the hand-written renderer turned these inside out.
        assert_eq!(
            markdown("clients **deduplicate by `msg_id`** (per group)"),
            "<p>clients <strong>deduplicate by <code>msg_id</code></strong> (per group)</p>\n"
        );
        assert_eq!(
            markdown("- **`after_msg_id`:** the page"),
            "<ul>\n<li><strong><code>after_msg_id</code>:</strong> the page</li>\n</ul>\n"
        );
    }

    #[test]
    fn raw_html_in_the_spec_is_shown_as_text() {
        let html = markdown(
            "Inline <b onclick=\"x()\">bold</b> and `Bearer <token>`.\n\n<script>alert(1)</script>",
        );
        assert!(!html.contains("<b "), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("<code>Bearer &lt;token&gt;</code>"), "{html}");
    }

    #[test]
    fn images_and_script_links_become_text_other_links_stay() {
        let html = markdown(
            "![a logo](https://example.com/logo.png) [run](javascript:alert(1)) \
             [spec](/openapi.yaml) [site](https://example.com/)",
        );
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("a logo"), "{html}");
        assert!(!html.contains("javascript"), "{html}");
        assert!(html.contains("run"), "{html}");
        assert!(
            html.contains("<a href=\"/openapi.yaml\">spec</a>"),
            "{html}"
        );
        assert!(
            html.contains("<a href=\"https://example.com/\">site</a>"),
            "{html}"
        );
    }

    #[test]
    fn the_page_has_no_script_and_loads_nothing_from_elsewhere() {
        let spec: Value = serde_yaml::from_str(OPENAPI_YAML).unwrap();
        let page = render(&spec);
        for forbidden in ["<script", "<img", "<link", "<iframe", " src=", "url("] {
            assert!(!page.contains(forbidden), "the page contains {forbidden}");
        }
        assert!(page.contains("<strong>deduplicate by <code>msg_id</code></strong>"));
    }

    #[test]
    fn every_operation_of_the_spec_is_on_the_page() {
        let spec: Value = serde_yaml::from_str(OPENAPI_YAML).unwrap();
        let page = render(&spec);
        for (path, item) in spec["paths"].as_object().unwrap() {
            for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
                let id = item[*method]["operationId"].as_str().unwrap();
                assert!(
                    page.contains(&format!("id=\"{id}\"")),
                    "{method} {path} missing"
                );
            }
        }
        assert!(
            page.contains("id=\"pushNotification\""),
            "the push webhook missing"
        );
    }
}
