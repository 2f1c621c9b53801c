//! Export operations: validation against the catalog, resolution, a checkpointed export's
//! parts, the view, and the service that every adapter (REST, page) calls.

pub mod parts;
pub mod resolve;
pub mod service;
pub mod validate;
pub mod view;
