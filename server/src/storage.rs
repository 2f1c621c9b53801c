//! Object stores: a local folder (embedded default) or S3; one per deployment when configured
//! (`EXPORTD_STORE_<DEPLOYMENT>`), so a report never leaves its deployment.

use crate::config::Config;
use crate::error::AppError;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A shared object store handle.
pub type Store = Arc<dyn ObjectStore>;

/// Opens a store from its URL: `file://folder` or `s3://bucket[/prefix]` (with the `AWS_*` variables).
pub fn open_store(url: &str) -> Result<Store, String> {
    if let Some(path) = url.strip_prefix("file://") {
        let path = if path.is_empty() { "." } else { path };
        std::fs::create_dir_all(path).map_err(|e| format!("cannot create {path}: {e}"))?;
        let store = LocalFileSystem::new_with_prefix(path).map_err(|e| format!("cannot open {path}: {e}"))?;
        return Ok(Arc::new(store));
    }
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let s3 = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| format!("cannot open s3://{bucket}: {e}"))?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            return Ok(Arc::new(s3));
        }
        return Ok(Arc::new(PrefixStore::new(s3, prefix.to_owned())));
    }
    Err(format!("unsupported store URL {url:?}: use file://… or s3://…"))
}

/// The stores of every deployment, opened on first use.
pub struct Stores {
    config: Arc<Config>,
    opened: Mutex<HashMap<String, Store>>,
}

impl Stores {
    /// Stores configured by `config`.
    pub fn new(config: Arc<Config>) -> Stores {
        Stores { config, opened: Mutex::new(HashMap::new()) }
    }

    /// The store of a deployment.
    pub fn for_deployment(&self, deployment: &str) -> Result<Store, AppError> {
        let mut opened = self.opened.lock().map_err(|_| AppError::Internal("store registry poisoned".into()))?;
        if let Some(store) = opened.get(deployment) {
            return Ok(store.clone());
        }
        let store = open_store(&self.config.store_url_for(deployment)).map_err(AppError::Internal)?;
        opened.insert(deployment.to_owned(), store.clone());
        Ok(store)
    }
}

/// The staging key of one attempt.
pub fn staging_key(export_id: &str, generation: i32) -> object_store::path::Path {
    object_store::path::Path::from(format!("staging/{export_id}/{generation}"))
}

/// The immutable, content-addressed key of a published artifact.
pub fn artifact_key(tenant_id: &str, export_id: &str, sha256: &str) -> object_store::path::Path {
    object_store::path::Path::from(format!("exports/{tenant_id}/{export_id}/{sha256}.csv"))
}
