//! `GET /api/openapi.json`: the OpenAPI 3.1 document, generated from the handlers' annotations.

use axum::Json;
use utoipa::OpenApi;

/// The API's OpenAPI description.
#[derive(OpenApi)]
#[openapi(
    info(title = "exportd", description = "Idempotent CSV export: one authorized intent, one operation, at most one file."),
    paths(
        super::session::login,
        super::session::whoami,
        super::session::logout,
        super::exports::create,
        super::exports::list,
        super::exports::show,
        super::exports::cancel,
        super::downloads::download,
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
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
