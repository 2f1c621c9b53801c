//! Downloads: minting a link (`/api/exports/{id}/download`, `/api/exports/{id}/parts/{n}/download`)
//! and serving one (`/files/{id}`): a file, a part, or a checkpointed export's bundle.

use crate::auth::Actor;
use crate::error::AppError;
use crate::exports::service;
use crate::job_store::kind::JobKind;
use crate::service::artifacts::{artifact_gone, Body as Stored, Served};
use crate::links::LinkQuery;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use super::ids::{ExportIdPath, ExportPartPath, LinkIdPath};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::TryStreamExt;
use object_store::{GetOptions, GetRange};

/// `GET /api/exports/{id}/download`: 303 to a freshly minted link to the file (or, for a
/// checkpointed export, its bundle).
#[utoipa::path(get, path = "/api/exports/{id}/download", tag = "downloads",
    params(("id" = String, Path, description = "exp_…")),
    responses((status = 303, description = "To a freshly minted link", headers(("Location" = String))), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"), (status = 403, description = "permission-revoked", body = app::Problem, content_type = "application/problem+json"), (status = 404, description = "export-not-found", body = app::Problem, content_type = "application/problem+json"), (status = 409, description = "export-not-ready", body = app::Problem, content_type = "application/problem+json"), (status = 410, description = "artifact-expired", body = app::Problem, content_type = "application/problem+json")))]
pub async fn download(State(state): State<AppState>, actor: Actor, ExportIdPath(id): ExportIdPath) -> Result<Response, AppError> {
    see_other(&service::download_link(&state, &actor, &id, Served::Artifact).await?)
}

/// `GET /api/exports/{id}/parts/{n}/download`: 303 to a freshly minted link to part `n` of a
/// checkpointed export (SPEC §5.1): the bundle's answers, and 404 for a part that does not exist.
#[utoipa::path(get, path = "/api/exports/{id}/parts/{n}/download", tag = "downloads",
    params(("id" = String, Path, description = "exp_…"), ("n" = i32, Path, minimum = 1, description = "the part's index, from 1")),
    responses((status = 303, description = "To a freshly minted link to the part", headers(("Location" = String))), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"), (status = 403, description = "permission-revoked", body = app::Problem, content_type = "application/problem+json"), (status = 404, description = "export-not-found: no such export, or no such part", body = app::Problem, content_type = "application/problem+json"), (status = 409, description = "export-not-ready", body = app::Problem, content_type = "application/problem+json"), (status = 410, description = "artifact-expired", body = app::Problem, content_type = "application/problem+json")))]
pub async fn download_part(State(state): State<AppState>, actor: Actor, ExportPartPath(id, n): ExportPartPath) -> Result<Response, AppError> {
    see_other(&service::download_link(&state, &actor, &id, Served::Part(n)).await?)
}

pub fn see_other(url: &str) -> Result<Response, AppError> {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    let location = HeaderValue::from_str(url).map_err(|e| AppError::Internal(e.to_string()))?;
    resp.headers_mut().insert(header::LOCATION, location);
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    Ok(resp)
}

fn header_value(s: &str) -> Result<HeaderValue, AppError> {
    HeaderValue::from_str(s).map_err(|e| AppError::Internal(e.to_string()))
}

/// What part of an artifact an answer carries.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// The whole file (200).
    Whole,
    /// One range, first and last byte inclusive (206).
    Range(u64, u64),
}

/// Whether `If-Range` lets a `Range` apply: an entity tag that equals ours by strong comparison
/// (RFC 9110 §13.1.5). A date never does, as the answers carry no `Last-Modified`.
fn if_range_allows(headers: &HeaderMap, etag: &str) -> bool {
    match headers.get(header::IF_RANGE) {
        None => true,
        Some(v) => v.to_str().is_ok_and(|v| v.trim() == etag),
    }
}

/// The part of a `len`-byte file with ETag `etag` that a request asks for (RFC 9110 §14): a
/// `Range` applies to GET only, and only when `If-Range` (if sent) names this file; one range
/// gives that part; several give the whole file (a server may ignore `Range`, and one file is
/// all a resumed download needs); a `Range` that does not parse is ignored; one that no byte of
/// the file satisfies is 416.
fn requested_part(method: &Method, headers: &HeaderMap, len: u64, etag: &str) -> Result<Part, AppError> {
    let Some(range) = headers.get(header::RANGE) else { return Ok(Part::Whole) };
    if *method != Method::GET || !if_range_allows(headers, etag) {
        return Ok(Part::Whole);
    }
    let Ok(parsed) = range.to_str().map_err(|_| ()).and_then(|v| http_range_header::parse_range_header(v).map_err(|_| ())) else {
        return Ok(Part::Whole);
    };
    if parsed.ranges.len() > 1 {
        return Ok(Part::Whole);
    }
    match parsed.validate(len).as_deref() {
        Ok([only]) => Ok(Part::Range(*only.start(), *only.end())),
        Ok(_) => Ok(Part::Whole),
        Err(_) => Err(AppError::RangeNotSatisfiable { len }),
    }
}

/// `GET /files/{id}?…` (and `HEAD`): the bytes of a ready artifact (a file, a part, or a
/// checkpointed export's bundle, streamed from its parts), after checking the link and
/// re-checking the minting actor's authority; a `Range` gives one part of it.
#[utoipa::path(get, path = "/files/{id}", tag = "downloads",
    params(("id" = String, Path), ("d" = String, Query, description = "artifact digest"), ("a" = String, Query, description = "minting actor"),
        ("e" = i64, Query, description = "expiry, epoch seconds"), ("k" = String, Query, description = "key id"), ("p" = Option<i32>, Query, description = "the part, for a link to one part"), ("s" = String, Query, description = "signature"),
        ("Range" = Option<String>, Header, description = "one byte range (RFC 9110 §14)"), ("If-Range" = Option<String>, Header, description = "the ETag the range is for")),
    responses((status = 200, description = "The CSV (text/csv), gzipped CSV (application/gzip), workbook (XLSX) or bundle (application/zip)", content((String = "text/csv"), (String = "application/gzip"), (String = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"), (String = "application/zip"))),
        (status = 206, description = "One range of it", content((String = "text/csv"), (String = "application/gzip"), (String = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"), (String = "application/zip"))),
        (status = 403, description = "link-invalid, link-expired or permission-revoked", body = app::Problem, content_type = "application/problem+json"), (status = 409, description = "export-not-ready", body = app::Problem, content_type = "application/problem+json"), (status = 410, description = "artifact-expired", body = app::Problem, content_type = "application/problem+json"),
        (status = 416, description = "range-not-satisfiable", body = app::Problem, content_type = "application/problem+json")))]
pub async fn serve_link(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    LinkIdPath(id): LinkIdPath,
    query: Result<Query<LinkQuery>, QueryRejection>,
) -> Result<Response, AppError> {
    let Query(query) = query.map_err(|_| AppError::LinkInvalid)?;
    let grant = state.links.check(&id, &query, state.now_ms() / 1000).await?;
    // What a link serves is the kind's: a new kind answers here, or this does not compile.
    let linked = match JobKind::of_id(&id) {
        Some(JobKind::Export) => service::open_link(&state, &grant).await?,
        Some(JobKind::Import) => crate::imports::service::open_report(&state, &grant).await?,
        None => return Err(AppError::LinkInvalid),
    };
    let gone = artifact_gone;
    let len = linked.len;
    let etag = format!("\"{}\"", linked.etag_sha256);
    let part = requested_part(&method, &headers, len, &etag)?;

    let body = if method == Method::HEAD {
        // The same answer as a GET, without reading the bytes or recording a download.
        if let Stored::Object(key) = &linked.body {
            linked.store.objects().head(key).await.map_err(gone)?;
        }
        Body::empty()
    } else {
        let stream = match &linked.body {
            Stored::Object(key) => {
                let range = match part {
                    Part::Whole => None,
                    Part::Range(first, last) => Some(GetRange::Bounded(first..last + 1)),
                };
                linked.store.objects().get_opts(key, GetOptions { range, ..Default::default() }).await.map_err(gone)?.into_stream()
            }
            // The bundle's own bytes are made from the checkpoints, and its parts read in ranges
            // from the store as the client takes them: nothing is copied or held whole.
            Stored::Bundle(bundle) => {
                let range = match part {
                    Part::Whole => 0..len,
                    Part::Range(first, last) => first..last + 1,
                };
                linked.store.stream_pieces(bundle.pieces(range))
            }
        };
        let what = match linked.served {
            Served::Artifact => "downloaded".to_owned(),
            Served::Part(n) => format!("downloaded part {n}"),
        };
        let detail = match part {
            Part::Whole => what,
            Part::Range(first, last) => format!("{what}: bytes {first}-{last}"),
        };
        service::record_download(&state, &linked.export, &grant.actor_id, &detail).await?;
        Body::from_stream(stream.map_err(std::io::Error::other))
    };

    let digest = hex::decode(&linked.digest).map_err(|e| AppError::Internal(e.to_string()))?;
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(linked.media_type));
    h.insert(header::CONTENT_DISPOSITION, header_value(&format!("attachment; filename=\"{}\"", linked.filename))?);
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::ETAG, header_value(&etag)?);
    // RFC 9530: the digest of the whole representation (Repr-Digest), on a range too, so a
    // resumed download checks what it assembled; it is also the content's (Content-Digest) only
    // when all of it is sent. A bundle's digest is of its bytes (computed once, at release), its
    // ETag the manifest's digest.
    let digest = header_value(&format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(digest)))?;
    h.insert("repr-digest", digest.clone());
    match part {
        Part::Whole => {
            h.insert("content-digest", digest);
            h.insert(header::CONTENT_LENGTH, header_value(&len.to_string())?);
        }
        Part::Range(first, last) => {
            h.insert(header::CONTENT_LENGTH, header_value(&(last - first + 1).to_string())?);
            h.insert(header::CONTENT_RANGE, header_value(&format!("bytes {first}-{last}/{len}"))?);
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
        }
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETAG: &str = "\"abc\"";

    fn part(method: Method, pairs: &[(header::HeaderName, &str)], len: u64) -> Result<Part, AppError> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        requested_part(&method, &headers, len, ETAG)
    }

    #[test]
    fn one_range_gives_its_bytes_and_a_suffix_counts_from_the_end() {
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=0-99")], 1000).unwrap(), Part::Range(0, 99));
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=-100")], 1000).unwrap(), Part::Range(900, 999));
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=990-")], 1000).unwrap(), Part::Range(990, 999));
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=900-5000")], 1000).unwrap(), Part::Range(900, 999));
    }

    #[test]
    fn a_range_past_the_end_is_unsatisfiable_and_a_malformed_or_multiple_one_gives_the_whole_file() {
        assert!(matches!(part(Method::GET, &[(header::RANGE, "bytes=1000-")], 1000), Err(AppError::RangeNotSatisfiable { len: 1000 })));
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=0-9,20-29")], 1000).unwrap(), Part::Whole);
        assert_eq!(part(Method::GET, &[(header::RANGE, "pages=1")], 1000).unwrap(), Part::Whole);
        assert_eq!(part(Method::GET, &[], 1000).unwrap(), Part::Whole);
    }

    #[test]
    fn if_range_applies_the_range_only_to_the_same_file_and_head_ignores_ranges() {
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=0-9"), (header::IF_RANGE, ETAG)], 1000).unwrap(), Part::Range(0, 9));
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=0-9"), (header::IF_RANGE, "\"other\"")], 1000).unwrap(), Part::Whole);
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=0-9"), (header::IF_RANGE, "W/\"abc\"")], 1000).unwrap(), Part::Whole);
        assert_eq!(part(Method::GET, &[(header::RANGE, "bytes=0-9"), (header::IF_RANGE, "Tue, 01 Dec 2026 10:00:00 GMT")], 1000).unwrap(), Part::Whole);
        assert_eq!(part(Method::HEAD, &[(header::RANGE, "bytes=0-9")], 1000).unwrap(), Part::Whole);
    }
}
