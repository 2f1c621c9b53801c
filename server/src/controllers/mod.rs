//! HTTP adapters, one module per domain. Each handler extracts, calls the service, and shapes
//! the response; no rule lives here.

pub mod body;
pub mod downloads;
pub mod exports;
pub mod health;
pub mod ids;
pub mod imports;
pub mod oidc;
pub mod openapi;
pub mod page;
pub mod notifications;
pub mod schedules;
pub mod session;
pub mod uploads;
