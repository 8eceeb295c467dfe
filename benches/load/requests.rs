//! A measured request's outcome: Ok with the items it carried, or Err with a short label
//! ("503 unavailable", "transport: timeout") that the tables count.

use serde_json::Value;

use crate::support::http::{status_label, transport_label};

/// Sends the request; Ok with the response on `expect`, otherwise Err with its label.
async fn checked(
    request: reqwest::RequestBuilder,
    expect: u16,
) -> Result<reqwest::Response, String> {
    let response = request.send().await.map_err(transport_label)?;
    let status = response.status().as_u16();
    if status == expect {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    Err(status_label(status, &body))
}

/// The request's response body, read to the end and dropped (1 item).
pub async fn expect_empty(request: reqwest::RequestBuilder, expect: u16) -> Result<u64, String> {
    let response = checked(request, expect).await?;
    response.bytes().await.map_err(transport_label)?;
    Ok(1)
}

pub async fn expect_json(request: reqwest::RequestBuilder, expect: u16) -> Result<Value, String> {
    let response = checked(request, expect).await?;
    response
        .json::<Value>()
        .await
        .map_err(|e| format!("bad body: {e}"))
}
