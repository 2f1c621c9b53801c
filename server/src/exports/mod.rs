//! Export operations: the key, the fingerprint, the report registry, resolution, and the service
//! that every adapter (REST, page) calls.

pub mod canonical;
pub mod context;
pub mod ids;
pub mod key;
pub mod parts;
pub mod reports;
pub mod resolve;
pub mod service;
pub mod validate;
pub mod view;
