//! exportd: idempotent CSV export, from the browser click to the worker's completion.
//!
//! The binary (`main.rs`) parses the command line into a [`config::Config`] and calls into these
//! modules. The REST handlers (`controllers`) and the page are thin adapters over the service
//! layer (`exports::service`, `imports::service`, over what they share in `service`), where each rule of the product contract lives once.

pub mod admin;
pub mod auth;
pub mod bundle;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod controllers;
pub mod csv_cells;
pub mod db;
pub mod entities;
pub mod error;
pub mod exports;
pub mod faults;
pub mod file_type;
pub mod imports;
pub mod iso_codes;
pub mod job_store;
pub mod links;
pub mod metrics;
pub mod notifications;
pub mod operations;
pub mod row_encoder;
pub mod schedules;
pub mod seed;
pub mod server;
pub mod service;
pub mod site_assets;
pub mod state;
pub mod storage;
pub mod worker;
pub mod xlsx_cells;
pub mod xlsx_package;

pub use error::AppError;
