//! Which object store holds a deployment's files, bound in the database (SPEC §5.13), so that no
//! process writes a deployment's files elsewhere because its own environment says so.
//!
//! A store carries an identity in a marker object ([`MARKER`]) written at its first use with
//! create-if-absent, and `deployment_stores` records, per deployment, the identity of the store
//! its files went to first. A process checks the store it is configured with for a deployment
//! against that record before it uses it (and `serve` and `worker` check every deployment they
//! know at start, refusing to start on a mismatch). A URL is not an identity: `file://data/objects`
//! is relative, and two URLs may name one bucket. A deliberate move of a deployment to another
//! store is recorded with `exportd stores rebind DEPLOYMENT`.

use super::ExportStore;
use crate::entities::deployment_stores;
use object_store::path::Path;
use object_store::{PutMode, PutOptions, PutPayload};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, Set};

/// The key of a store's marker object.
pub const MARKER: &str = "exportd-store.json";

/// Why a deployment's configured store may not be used.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    /// The configured store is not the one the deployment's files are in.
    #[error("{}", elsewhere(.deployment, .found.as_deref(), .recorded))]
    Elsewhere {
        /// The deployment.
        deployment: String,
        /// The identity in the configured store's marker, if it has one.
        found: Option<String>,
        /// The identity recorded for the deployment.
        recorded: String,
    },
    /// The store's marker could not be read or written.
    #[error("deployment {deployment}: its store does not answer: {source}")]
    Store {
        /// The deployment.
        deployment: String,
        /// What the store said.
        source: object_store::Error,
    },
    /// The database did not answer.
    #[error("deployment {deployment}: {source}")]
    Database {
        /// The deployment.
        deployment: String,
        /// What the database said.
        source: DbErr,
    },
}

fn elsewhere(deployment: &str, found: Option<&str>, recorded: &str) -> String {
    let configured = match found {
        Some(identity) => format!("identity {identity}"),
        None => "no identity".to_owned(),
    };
    format!(
        "deployment {deployment}: the configured store ({configured}) is not the store its files are in (identity {recorded}); \
         configure that store with EXPORTD_STORE_{}, or record a deliberate move with `exportd stores rebind {deployment}`",
        deployment.to_ascii_uppercase()
    )
}

impl BindingError {
    /// Whether the store is the wrong one (rather than one that did not answer).
    pub fn is_elsewhere(&self) -> bool {
        matches!(self, BindingError::Elsewhere { .. })
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Marker {
    identity: String,
}

/// The identity in `store`'s marker, if it has one.
pub async fn read_marker(store: &ExportStore) -> Result<Option<String>, object_store::Error> {
    match store.objects().get(&Path::from(MARKER)).await {
        Ok(got) => {
            let bytes = got.bytes().await?;
            let marker: Marker = serde_json::from_slice(&bytes)
                .map_err(|e| object_store::Error::Generic { store: "marker", source: format!("{MARKER} is not exportd's marker: {e}").into() })?;
            Ok(Some(marker.identity))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The identity of `store`, writing its marker with a new one if it has none (create-if-absent,
/// so processes starting together agree on one).
pub async fn marker_or_new(store: &ExportStore) -> Result<String, object_store::Error> {
    if let Some(identity) = read_marker(store).await? {
        return Ok(identity);
    }
    let identity = format!("sto_{}", uuid::Uuid::new_v4().simple());
    let body = serde_json::to_vec(&Marker { identity: identity.clone() }).map_err(|e| object_store::Error::Generic { store: "marker", source: Box::new(e) })?;
    let create = PutOptions { mode: PutMode::Create, ..Default::default() };
    match store.objects().put_opts(&Path::from(MARKER), PutPayload::from(body), create).await {
        Ok(_) => {
            store.make_durable(&Path::from(MARKER)).await?;
            Ok(identity)
        }
        Err(object_store::Error::AlreadyExists { .. }) => read_marker(store)
            .await?
            .ok_or_else(|| object_store::Error::Generic { store: "marker", source: format!("{MARKER} vanished").into() }),
        Err(e) => Err(e),
    }
}

async fn recorded<C: ConnectionTrait>(db: &C, deployment: &str) -> Result<Option<String>, DbErr> {
    Ok(deployment_stores::Entity::find_by_id(deployment.to_owned()).one(db).await?.map(|r| r.identity))
}

/// Checks that `store` is the store of `deployment` (lower case), recording it as such if the
/// deployment has no store yet.
pub async fn bind<C: ConnectionTrait>(db: &C, deployment: &str, store: &ExportStore, now_ms: i64) -> Result<(), BindingError> {
    let database = |source| BindingError::Database { deployment: deployment.to_owned(), source };
    let unavailable = |source| BindingError::Store { deployment: deployment.to_owned(), source };
    let recorded_identity = match recorded(db, deployment).await.map_err(database)? {
        Some(identity) => identity,
        None => {
            let identity = marker_or_new(store).await.map_err(unavailable)?;
            record(db, deployment, &identity, now_ms, false).await.map_err(database)?;
            // Another process may have recorded another store first.
            recorded(db, deployment).await.map_err(database)?.unwrap_or(identity)
        }
    };
    let found = read_marker(store).await.map_err(unavailable)?;
    if found.as_deref() != Some(recorded_identity.as_str()) {
        return Err(BindingError::Elsewhere { deployment: deployment.to_owned(), found, recorded: recorded_identity });
    }
    Ok(())
}

/// Records `store` as the store of `deployment` from now on, whatever was recorded before (the
/// operator's deliberate move); returns its identity.
pub async fn rebind<C: ConnectionTrait>(db: &C, deployment: &str, store: &ExportStore, now_ms: i64) -> Result<String, BindingError> {
    let identity = marker_or_new(store).await.map_err(|source| BindingError::Store { deployment: deployment.to_owned(), source })?;
    record(db, deployment, &identity, now_ms, true).await.map_err(|source| BindingError::Database { deployment: deployment.to_owned(), source })?;
    Ok(identity)
}

async fn record<C: ConnectionTrait>(db: &C, deployment: &str, identity: &str, now_ms: i64, replace: bool) -> Result<(), DbErr> {
    let row = deployment_stores::ActiveModel { deployment: Set(deployment.to_owned()), identity: Set(identity.to_owned()), recorded_at: Set(now_ms) };
    let on_conflict = if replace {
        OnConflict::column(deployment_stores::Column::Deployment)
            .update_columns([deployment_stores::Column::Identity, deployment_stores::Column::RecordedAt])
            .to_owned()
    } else {
        OnConflict::column(deployment_stores::Column::Deployment).do_nothing().to_owned()
    };
    deployment_stores::Entity::insert(row).on_conflict(on_conflict).exec_without_returning(db).await?;
    Ok(())
}

/// Every deployment's recorded store identity, by deployment.
pub async fn all_recorded<C: ConnectionTrait>(db: &C) -> Result<Vec<(String, String)>, DbErr> {
    Ok(deployment_stores::Entity::find().all(db).await?.into_iter().map(|r| (r.deployment, r.identity)).collect())
}
