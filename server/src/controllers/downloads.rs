//! Downloads: minting a link (`/api/exports/{id}/download`) and serving one (`/files/{id}`).

use crate::auth::{load_active_actor, Actor, AuthVia};
use crate::entities::exports;
use crate::error::AppError;
use crate::exports::service::{self, role_covers};
use crate::job_store::{audit, Mover};
use crate::exports::view::{resolved_of, status_of};
use crate::links::LinkQuery;
use crate::server::AppState;
use app::ExportStatus;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::TryStreamExt;
use sea_orm::EntityTrait;

/// `GET /api/exports/{id}/download`: 303 to a freshly minted link.
#[utoipa::path(get, path = "/api/exports/{id}/download", tag = "downloads",
    params(("id" = String, Path, description = "exp_…")),
    responses((status = 303, description = "To a freshly minted link", headers(("Location" = String))), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"), (status = 403, description = "permission-revoked", body = app::Problem, content_type = "application/problem+json"), (status = 404, description = "export-not-found", body = app::Problem, content_type = "application/problem+json"), (status = 409, description = "export-not-ready", body = app::Problem, content_type = "application/problem+json"), (status = 410, description = "artifact-expired", body = app::Problem, content_type = "application/problem+json")))]
pub async fn download(State(state): State<AppState>, actor: Actor, Path(id): Path<String>) -> Result<Response, AppError> {
    let url = service::download_link(&state, &actor, &id).await?;
    let mut resp = StatusCode::SEE_OTHER.into_response();
    let location = HeaderValue::from_str(&url).map_err(|e| AppError::Internal(e.to_string()))?;
    resp.headers_mut().insert(header::LOCATION, location);
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    Ok(resp)
}

fn header_value(s: &str) -> Result<HeaderValue, AppError> {
    HeaderValue::from_str(s).map_err(|e| AppError::Internal(e.to_string()))
}

/// `GET /files/{id}?…`: the bytes of a ready artifact, after checking the link and re-checking
/// the minting actor's authority.
#[utoipa::path(get, path = "/files/{id}", tag = "downloads",
    params(("id" = String, Path), ("d" = String, Query, description = "artifact digest"), ("a" = String, Query, description = "minting actor"),
        ("e" = i64, Query, description = "expiry, epoch seconds"), ("k" = String, Query, description = "key id"), ("s" = String, Query, description = "signature")),
    responses((status = 200, description = "The CSV", content_type = "text/csv"), (status = 403, description = "link-invalid, link-expired or permission-revoked", body = app::Problem, content_type = "application/problem+json"), (status = 409, description = "export-not-ready", body = app::Problem, content_type = "application/problem+json"), (status = 410, description = "artifact-expired", body = app::Problem, content_type = "application/problem+json")))]
pub async fn serve_link(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<LinkQuery>, QueryRejection>,
) -> Result<Response, AppError> {
    let Query(query) = query.map_err(|_| AppError::LinkInvalid)?;
    let grant = state.links.check(&id, &query, state.now_ms() / 1000)?;
    let m = exports::Entity::find_by_id(grant.export_id.clone()).one(&state.db).await?.ok_or(AppError::LinkInvalid)?;
    if m.artifact_sha256.as_deref() != Some(grant.sha256.as_str()) {
        return Err(AppError::LinkInvalid);
    }
    if status_of(&m)? != ExportStatus::Ready {
        return Err(AppError::ExportNotReady);
    }
    if m.artifact_expired {
        return Err(AppError::ArtifactExpired);
    }
    let actor = load_active_actor(&state.db, &grant.actor_id, AuthVia::Token).await?;
    let resolved = resolved_of(&m)?;
    let allowed = actor.as_ref().is_some_and(|a| a.tenant_id == m.tenant_id && role_covers(a.role, &m.report, &resolved));
    if !allowed {
        return Err(AppError::PermissionRevoked);
    }
    let key = m.artifact_key.clone().ok_or_else(|| AppError::Internal(format!("ready export {} has no artifact key", m.id)))?;
    let store = state.stores.for_deployment(&m.deployment)?;
    let object = match store.objects().get(&object_store::path::Path::from(key)).await {
        Ok(object) => object,
        // Gone from the store (retention ran, or someone removed it): expired, not an error.
        Err(object_store::Error::NotFound { .. }) => return Err(AppError::ArtifactExpired),
        Err(e) => return Err(e.into()),
    };
    let stream = object.into_stream().map_err(std::io::Error::other);
    audit::record_event(&state.db, &m, Mover::User(&grant.actor_id), state.now_ms(), "downloaded").await?;

    let digest = hex::decode(&grant.sha256).map_err(|e| AppError::Internal(e.to_string()))?;
    let filename = format!("{}-{}.csv", m.report, m.id);
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
    h.insert(header::CONTENT_DISPOSITION, header_value(&format!("attachment; filename=\"{filename}\""))?);
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    h.insert(header::ETAG, header_value(&format!("\"{}\"", grant.sha256))?);
    h.insert("content-digest", header_value(&format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(digest)))?);
    if let Some(bytes) = m.artifact_bytes {
        h.insert(header::CONTENT_LENGTH, header_value(&bytes.to_string())?);
    }
    Ok(resp)
}
