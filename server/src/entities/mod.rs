//! SeaORM entities of the tables made by the `migrations` crate. Timestamps are epoch milliseconds.

pub mod api_tokens;
pub mod customers;
pub mod deployment_stores;
pub mod import_refusals;
pub mod job_checkpoints;
pub mod job_events;
pub mod jobs;
pub mod login_throttle;
pub mod oidc_sign_ins;
pub mod notification_attempts;
pub mod notifications;
pub mod orders;
pub mod schedule_revisions;
pub mod schedules;
pub mod sessions;
pub mod settings;
pub mod signing_keys;
pub mod tenants;
pub mod uploads;
pub mod webhook_secrets;
pub mod users;
