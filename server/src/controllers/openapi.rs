//! `GET /api/openapi.json`: the OpenAPI 3.1 document, generated from the handlers' annotations.

use axum::Json;
use utoipa::OpenApi;

/// The API's OpenAPI description.
#[derive(OpenApi)]
#[openapi(
    info(title = "exportd", description = "Idempotent CSV export and import: one authorized intent, one operation, at most one file, every imported row applied at most once."),
    paths(
        super::session::login,
        super::session::whoami,
        super::session::logout,
        super::exports::create,
        super::exports::list,
        super::exports::show,
        super::exports::cancel,
        super::uploads::create,
        super::imports::create,
        super::imports::list,
        super::imports::show,
        super::imports::cancel,
        super::imports::report,
        super::downloads::download,
        super::downloads::download_part,
        super::downloads::serve_link,
        super::health::healthz,
        super::health::readyz,
        openapi_json,
    ),
    components(schemas(app::Problem, app::ProblemField, app::ExportStatus))
)]
pub struct ApiDoc;

/// The document.
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", responses((status = 200, description = "This document")))]
pub async fn openapi_json() -> Json<serde_json::Value> {
    Json(document())
}

/// The document as served: utoipa 5.5's link objects name their fields in snake case
/// (`operation_id`); OpenAPI's are camel case (`operationId`), which tools that follow links
/// (schemathesis' stateful tests) need.
pub fn document() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let responses = doc.get_mut("paths").and_then(|p| p.as_object_mut()).into_iter().flat_map(|paths| paths.values_mut());
    let links = responses
        .filter_map(|item| item.as_object_mut())
        .flat_map(|item| item.values_mut())
        .filter_map(|operation| operation.get_mut("responses").and_then(|r| r.as_object_mut()))
        .flat_map(|responses| responses.values_mut())
        .filter_map(|response| response.get_mut("links").and_then(|l| l.as_object_mut()))
        .flat_map(|links| links.values_mut())
        .filter_map(|link| link.as_object_mut());
    for link in links {
        for (snake, camel) in [("operation_id", "operationId"), ("operation_ref", "operationRef"), ("request_body", "requestBody")] {
            if let Some(value) = link.remove(snake) {
                link.insert(camel.to_owned(), value);
            }
        }
    }
    // An upload's body is the file's bytes, whatever they hold: OpenAPI 3.1 declares such a
    // body with no schema, so no client takes a body for invalid by its shape.
    if let Some(csv) = doc.pointer_mut("/paths/~1api~1uploads/post/requestBody/content/text~1csv").and_then(|c| c.as_object_mut()) {
        csv.remove("schema");
    }
    doc
}
