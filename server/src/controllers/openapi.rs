//! `GET /api/openapi.json`: the OpenAPI 3.1 document, generated from the handlers' annotations.

use crate::catalog::Catalog;
use crate::state::AppState;
use axum::extract::State;
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
        super::notifications::list,
        super::schedules::create,
        super::schedules::list,
        super::schedules::show,
        super::schedules::update,
        super::schedules::pause,
        super::schedules::resume,
        super::schedules::delete,
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
pub async fn openapi_json(State(state): State<AppState>) -> Json<serde_json::Value> {
    let mut doc = document();
    with_catalog(&mut doc, &state.config.catalog);
    Json(doc)
}

/// Names the catalog's reports and datasets where a request names one (contract §12): the
/// report's and the dataset's allowed names, and each report's columns and filters in its
/// description.
pub fn with_catalog(doc: &mut serde_json::Value, catalog: &Catalog) {
    let names = |names: Vec<&str>| serde_json::Value::from(names.into_iter().map(str::to_owned).collect::<Vec<_>>());
    if let Some(report) = doc.pointer_mut("/components/schemas/ExportRequest/properties/report").and_then(|r| r.as_object_mut()) {
        let listed: Vec<String> = catalog
            .reports
            .iter()
            .map(|r| {
                let columns: Vec<String> = r.columns.iter().map(|c| if c.pii { format!("{} (PII)", c.name) } else { c.name.clone() }).collect();
                let filters: Vec<&str> = r.filters.iter().map(|f| f.name.as_str()).collect();
                format!("`{}`: columns {}; filters {}", r.name, columns.join(", "), if filters.is_empty() { "none".to_owned() } else { filters.join(", ") })
            })
            .collect();
        report.insert("description".into(), format!("The report's name, from the catalog. {}.", listed.join(". ")).into());
        report.remove("pattern");
        report.insert("enum".into(), names(catalog.reports.iter().map(|r| r.name.as_str()).collect()));
    }
    if let Some(dataset) = doc.pointer_mut("/components/schemas/ImportRequest/properties/dataset").and_then(|d| d.as_object_mut()) {
        dataset.insert("description".into(), "The dataset's name, from the catalog.".into());
        dataset.insert("enum".into(), names(catalog.datasets.iter().map(|d| d.name.as_str()).collect()));
    }
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
