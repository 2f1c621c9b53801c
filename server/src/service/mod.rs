//! What the services of every kind of job share: the context they work with, the caller's
//! `Idempotency-Key`, the request fingerprint, the shapes of ids, the reading of a request body,
//! the owner's jobs (create and cancel outcomes, cancel, pages) and what a signed link serves.
//! `exports/` and `imports/` are siblings over it; neither reaches into the other.

pub mod artifacts;
pub mod canonical;
pub mod context;
pub mod ids;
pub mod key;
pub mod owned;
pub mod requests;
