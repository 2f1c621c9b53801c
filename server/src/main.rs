//! The `exportd` binary: parses the command line and runs a command. Exit codes: 0 success,
//! 1 runtime error (message on stderr), 2 usage error (clap's).

use clap::Parser;
use exportd::cli::{CatalogCommand, Cli, Command, JobsCommand, KeysCommand, NotificationsCommand, StoresCommand, TenantCommand, TokenCommand, UserCommand, WebhookSecretCommand};
use exportd::clock::{SharedClock, SystemClock};
use exportd::config::{Config, WorkerConfig};
use exportd::entities::users;
use exportd::server::{app_router, AppState};
use exportd::worker::{self, WorkerContext};
use exportd::job_store::wakeup::Wakeup;
use exportd::{auth, db, operations, seed};
use sea_orm::{ActiveModelTrait, Set};
use std::process::ExitCode;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    return_large_buffers_to_the_system();
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(async_main()),
        Err(e) => {
            eprintln!("exportd: cannot start the runtime: {e}");
            ExitCode::from(1)
        }
    }
}

/// Makes glibc's allocator give every large buffer (CSV chunks, upload parts) back to the system
/// when it is freed. By default glibc raises its mmap threshold after the first such free, and
/// from then on serves those buffers from heap arenas that fragment: the peak RSS then grew with
/// the size of the export (33 MiB more after 1M rows than after 100k, on SQLite; 10 MiB with
/// this). Called before any thread starts.
fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter, and no other thread exists yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

async fn async_main() -> ExitCode {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("EXPORTD_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal: a log file or a collector gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // One JSON object per line, with the fields of every enclosing span (the request id).
    if std::env::var("EXPORTD_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        logs.json().with_current_span(true).with_span_list(true).init();
    } else {
        logs.init();
    }
    let _faults = exportd::faults::from_environment();
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("exportd: {message}");
            ExitCode::from(1)
        }
    }
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// A token cancelled on SIGTERM or Ctrl-C. The handlers are installed before this returns, so
/// a signal that arrives while the process is still starting is not lost.
fn shutdown_on_signal() -> Result<CancellationToken, String> {
    let token = CancellationToken::new();
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let cancel = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        let term = term.recv();
        #[cfg(not(unix))]
        let term = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
        tracing::info!(target: "exportd::lifecycle", "shutting down: no new claims; running jobs finish or are handed back");
        cancel.cancel();
    });
    Ok(token)
}

/// Reads and checks the catalog `file` (else `EXPORTD_CATALOG`, else the built-in one), printing
/// every error as `FILE:LINE:COL: message`.
fn checked_catalog(file: Option<&str>) -> Result<(String, exportd::catalog::Catalog), String> {
    let file = file.map(str::to_owned).or_else(|| std::env::var("EXPORTD_CATALOG").ok().filter(|f| !f.is_empty()));
    let name = file.clone().unwrap_or_else(|| exportd::catalog::DEMO_NAME.to_owned());
    exportd::catalog::Catalog::load(file.as_deref()).map_err(|errors| reported(&name, &errors))
}

/// Runs the catalog's SQL on its source (`EXPORTD_SOURCE_URL`, else the job store's database,
/// already migrated), as `catalog check` does: a process refuses to start on an error, or on a
/// source that does not answer.
async fn checked_on_source(config: &Config, name: &str) -> Result<(), String> {
    let url = config.source_url.as_deref().unwrap_or(&config.database_url);
    let checked = on_source(url, config.source_apart().is_some(), name, &config.catalog).await?;
    // A source that is only busy (a lock held from elsewhere) is no reason not to start: what
    // it could not check is said, and the process starts.
    for unchecked in &checked.unchecked {
        tracing::warn!(target: "exportd::lifecycle", "{unchecked}");
    }
    Ok(())
}

/// The source's half of a catalog's check, on `url`: its errors (printed) are an `Err`, as are a
/// source that does not answer and, for a source `apart` from the job store with a dataset to
/// import, a missing ledger; what the source was too busy to check is returned.
async fn on_source(url: &str, apart: bool, name: &str, catalog: &exportd::catalog::Catalog) -> Result<exportd::catalog::source::Checked, String> {
    let source = db::connect(url).await.map_err(|e| format!("source unreachable: {e}"))?;
    let checked = exportd::catalog::source::check(&source, name, catalog).await;
    let ledger = if apart && !catalog.datasets.is_empty() { exportd::catalog::source::ledger_ready(&source).await } else { Ok(()) };
    source.close().await.ok();
    if !checked.errors.is_empty() {
        return Err(reported(name, &checked.errors));
    }
    ledger?;
    Ok(checked)
}

/// Prints every error of the catalog `name` on stderr, and says how many there were.
fn reported(name: &str, errors: &[exportd::catalog::CatalogError]) -> String {
    for error in errors {
        eprintln!("{error}");
    }
    format!("{name}: {} error{} in the catalog", errors.len(), if errors.len() == 1 { "" } else { "s" })
}

async fn run(cli: Cli) -> Result<(), String> {
    if let Command::Catalog { command: CatalogCommand::MigrateSource } = &cli.command {
        let url = std::env::var("EXPORTD_SOURCE_URL").ok().filter(|u| !u.is_empty() && *u != cli.global.database_url);
        let Some(url) = url else {
            println!("the source is the job store's own database: imports need no ledger, and none was made");
            return Ok(());
        };
        let source = db::connect(&url).await.map_err(|e| format!("source unreachable: {e}"))?;
        exportd::catalog::source::migrate(&source).await.map_err(|e| format!("the ledger could not be made: {e}"))?;
        println!("exportd_import_batches is in the source");
        return Ok(());
    }
    if let Command::Catalog { command: CatalogCommand::Check { file, offline } } = &cli.command {
        let (name, catalog) = checked_catalog(file.as_deref())?;
        if !offline {
            // The source is the job store's own database unless EXPORTD_SOURCE_URL names another.
            let url = std::env::var("EXPORTD_SOURCE_URL").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| cli.global.database_url.clone());
            let checked = on_source(&url, url != cli.global.database_url, &name, &catalog).await?;
            // `catalog check` asked for an answer: a part it could not check is not a pass.
            if !checked.unchecked.is_empty() {
                for unchecked in &checked.unchecked {
                    eprintln!("{unchecked}");
                }
                return Err(format!("{name}: the source was busy; {} check(s) could not run", checked.unchecked.len()));
            }
        }
        println!("{} report{} and {} dataset{}: no errors", catalog.reports.len(), if catalog.reports.len() == 1 { "" } else { "s" }, catalog.datasets.len(), if catalog.datasets.len() == 1 { "" } else { "s" });
        return Ok(());
    }
    let mut config = Config::from_args(&cli.global).map_err(|e| e.to_string())?;
    let mut catalog_name = exportd::catalog::DEMO_NAME.to_owned();
    if let Command::Serve { .. } | Command::Worker { .. } = &cli.command {
        // A process refuses to start on a catalog with an error, before it takes any job.
        let (name, catalog) = checked_catalog(None)?;
        config.catalog = Arc::new(catalog);
        catalog_name = name;
    }
    let config = Arc::new(config);
    // Long-running commands stop gracefully on SIGTERM, even one that arrives during start-up.
    let shutdown = match cli.command {
        Command::Serve { .. } | Command::Worker { .. } => shutdown_on_signal()?,
        _ => CancellationToken::new(),
    };
    let connect = || async { db::connect_and_migrate(&config.database_url).await.map_err(|e| format!("database: {e}")) };
    match cli.command {
        // Answered before the configuration was read.
        Command::Catalog { .. } => Ok(()),
        Command::Migrate => {
            connect().await?;
            Ok(())
        }
        Command::Seed { demo: _, orders } => {
            let db = connect().await?;
            seed::seed_demo(&db, orders, now_ms()).await.map_err(|e| format!("seeding: {e}"))
        }
        Command::User { command: UserCommand::SetRole { email, role } } => {
            let role = auth::Role::parse(&role).ok_or_else(|| format!("unknown role {role:?}: use admin, analyst or viewer"))?;
            let db = connect().await?;
            let user = exportd::admin::person_by_email(&db, &email).await.map_err(|e| e.to_string())?;
            let mut user: users::ActiveModel = user.into();
            user.role = Set(role.as_str().to_owned());
            // A role set here is kept: the provider's later claims do not change it (contract §13).
            user.role_pinned = Set(true);
            user.update(&db).await.map_err(|e| format!("database: {e}"))?;
            Ok(())
        }
        Command::Tenant { command } => {
            let db = connect().await?;
            match command {
                TenantCommand::Add { slug, deployment, source_id } => {
                    exportd::admin::add_tenant(&db, &slug, &deployment, source_id.as_deref(), now_ms()).await.map_err(|e| e.to_string())?;
                }
                TenantCommand::List => print!("{}", exportd::admin::list_tenants(&db).await.map_err(|e| e.to_string())?),
            }
            Ok(())
        }
        Command::User { command: UserCommand::Add { email, tenant, role, password_stdin } } => {
            let password = if password_stdin {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).map_err(|e| format!("reading the password: {e}"))?;
                Some(line.trim_end_matches(['\n', '\r']).to_owned())
            } else {
                None
            };
            let db = connect().await?;
            exportd::admin::add_user(&db, &email, &tenant, &role, password.as_deref(), now_ms()).await.map_err(|e| e.to_string())?;
            Ok(())
        }
        Command::User { command: UserCommand::Deactivate { email } } => {
            let db = connect().await?;
            exportd::admin::deactivate_user(&db, &email, now_ms()).await.map_err(|e| e.to_string())
        }
        Command::User { command: UserCommand::List { tenant } } => {
            let db = connect().await?;
            print!("{}", exportd::admin::list_users(&db, tenant.as_deref()).await.map_err(|e| e.to_string())?);
            Ok(())
        }
        Command::Token { command: TokenCommand::List { email } } => {
            let db = connect().await?;
            print!("{}", exportd::admin::list_tokens(&db, &email).await.map_err(|e| e.to_string())?);
            Ok(())
        }
        Command::Token { command: TokenCommand::Revoke { id } } => {
            let db = connect().await?;
            exportd::admin::revoke_token(&db, &id, now_ms()).await.map_err(|e| e.to_string())
        }
        Command::Token { command: TokenCommand::Create { email } } => {
            let db = connect().await?;
            let user = exportd::admin::person_by_email(&db, &email).await.map_err(|e| e.to_string())?;
            let token = auth::create_token(&db, &user.id, now_ms()).await.map_err(|e| format!("database: {e}"))?;
            println!("{token}");
            Ok(())
        }
        Command::Jobs { command } => {
            let db = connect().await?;
            let answer = match command {
                JobsCommand::List { state, tenant, limit } => operations::list_jobs(&db, state.as_deref(), tenant.as_deref(), limit).await,
                JobsCommand::Show { id } => operations::show_job(&db, &id).await,
                JobsCommand::Cancel { id } => operations::cancel_job(&db, &id).await,
                JobsCommand::Redrive { id } => operations::redrive_job(&db, &id).await,
            }?;
            print!("{answer}");
            Ok(())
        }
        Command::Drain { off } => {
            let db = connect().await?;
            operations::set_drain(&db, !off, now_ms()).await.map_err(|e| format!("database: {e}"))?;
            println!("{}", if off { "creation resumed" } else { "creation paused on every instance" });
            Ok(())
        }
        Command::Keys { command: KeysCommand::Rotate } => {
            if config.signing_key.is_some() {
                return Err("EXPORTD_SIGNING_KEY is set, so links are signed with that one key, not the database's: \
                            rotate it by setting a new value on every instance"
                    .into());
            }
            let db = connect().await?;
            let id = exportd::links::rotate(&db, now_ms()).await.map_err(|e| format!("database: {e}"))?;
            println!("new links are signed with key {id}; links of the old key are refused after {} s", config.link_ttl.as_secs());
            Ok(())
        }
        Command::Notifications { command } => {
            let db = connect().await?;
            match command {
                NotificationsCommand::List { operation, status, limit } => {
                    let listed = exportd::notifications::listed(&db, operation.as_deref(), status.as_deref(), limit).await.map_err(|e| format!("database: {e}"))?;
                    for n in listed {
                        let last = n.attempts.last().map_or_else(|| "-".to_owned(), |a| a.outcome.clone());
                        println!("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}", n.id, n.operation, n.channel, n.status, n.attempts.len(), n.event_type, n.target, last);
                    }
                    Ok(())
                }
                NotificationsCommand::Redeliver { id } => {
                    if exportd::notifications::delivery::redeliver(&db, &id).await.map_err(|e| format!("database: {e}"))? {
                        println!("{id} is pending: the next delivery pass sends it");
                        Ok(())
                    } else {
                        Err(format!("no notification {id}"))
                    }
                }
            }
        }
        Command::WebhookSecret { command } => {
            let db = connect().await?;
            let (WebhookSecretCommand::Show { tenant } | WebhookSecretCommand::Rotate { tenant }) = &command;
            let found = exportd::notifications::secrets::tenant(&db, tenant).await.map_err(|e| format!("database: {e}"))?.ok_or_else(|| format!("no tenant {tenant}"))?;
            let secret = match command {
                WebhookSecretCommand::Show { .. } => exportd::notifications::secrets::ensure(&db, &found.id, now_ms()).await.map(|s| s.secret),
                WebhookSecretCommand::Rotate { .. } => exportd::notifications::secrets::rotate(&db, &found.id).await,
            }
            .map_err(|e| format!("database: {e}"))?;
            println!("{secret}");
            Ok(())
        }
        Command::Stores { command } => {
            let db = connect().await?;
            let stores = exportd::storage::Stores::new(config.clone());
            let answer = match command {
                StoresCommand::List => operations::list_stores(&db, &stores).await,
                StoresCommand::Rebind { deployment } => operations::rebind_store(&db, &stores, &deployment, now_ms()).await,
            }?;
            print!("{answer}");
            Ok(())
        }
        Command::Worker { worker, metrics_bind } => {
            let worker = WorkerConfig::from_args(&worker);
            let stores = Arc::new(exportd::storage::Stores::new(config.clone()));
            {
                let db = connect().await?;
                checked_on_source(&config, &catalog_name).await?;
                let deployments = if worker.deployments.is_empty() {
                    operations::known_deployments(&db).await.map_err(|e| format!("database: {e}"))?
                } else {
                    worker.deployments.clone()
                };
                let checked = operations::check_stores(&db, &stores, &deployments).await;
                db.close().await.ok();
                checked?;
            }
            let metrics = exportd::metrics::Metrics::default();
            let ctx = WorkerContext::connect(config.clone(), worker, stores, shutdown.clone(), Wakeup::default(), metrics.clone())
                .await
                .map_err(|e| format!("database: {e}"))?;
            let metrics_server = match metrics_bind {
                Some(bind) => {
                    let listener = tokio::net::TcpListener::bind(&bind).await.map_err(|e| format!("cannot listen on {bind}: {e}"))?;
                    let router = exportd::server::metrics_router(metrics.clone(), ctx.db.clone());
                    let stop = shutdown.clone();
                    Some(tokio::spawn(async move { axum::serve(listener, router).with_graceful_shutdown(async move { stop.cancelled().await }).await }))
                }
                None => None,
            };
            tracing::info!(target: "exportd::lifecycle", worker = %ctx.worker_id, "worker started");
            let clock: SharedClock = Arc::new(SystemClock);
            let service = exportd::service::context::ServiceContext::new(ctx.db.clone(), config.clone(), clock).await.map_err(|e| format!("database: {e}"))?;
            let scheduler = tokio::spawn(exportd::schedules::scheduler::run(service, config.scheduler_every, shutdown.clone()));
            let delivery = tokio::spawn(exportd::notifications::delivery::run_if_linkable(ctx.db.clone(), config.clone(), metrics.clone(), shutdown.clone()));
            worker::run(ctx).await;
            let _ = scheduler.await;
            let _ = delivery.await;
            if let Some(server) = metrics_server {
                let _ = server.await;
            }
            Ok(())
        }
        Command::Serve { bind, no_worker, worker } => {
            let db = connect().await?;
            checked_on_source(&config, &catalog_name).await?;
            let clock: SharedClock = Arc::new(SystemClock);
            let state = AppState::new(db.clone(), config.clone(), clock).await.map_err(|e| format!("database: {e}"))?;
            // The API reads every deployment's files (downloads), whatever its worker serves.
            let deployments = operations::known_deployments(&db).await.map_err(|e| format!("database: {e}"))?;
            operations::check_stores(&db, &state.stores, &deployments).await?;
            let worker_task = if no_worker {
                None
            } else {
                let ctx = WorkerContext::connect(
                    config.clone(),
                    WorkerConfig::from_args(&worker),
                    state.stores.clone(),
                    shutdown.clone(),
                    state.wakeup.clone(),
                    state.metrics.clone(),
                )
                    .await
                    .map_err(|e| format!("database: {e}"))?;
                let delivery = tokio::spawn(exportd::notifications::delivery::run_if_linkable(ctx.db.clone(), config.clone(), state.metrics.clone(), shutdown.clone()));
                Some((tokio::spawn(worker::run(ctx)), delivery))
            };
            // Every serve runs a scheduler loop, with or without a worker: no leader.
            let scheduler = tokio::spawn(exportd::schedules::scheduler::run(state.service.clone(), config.scheduler_every, shutdown.clone()));
            let listener = tokio::net::TcpListener::bind(&bind).await.map_err(|e| format!("cannot listen on {bind}: {e}"))?;
            let local = listener.local_addr().map_err(|e| e.to_string())?;
            tracing::info!(target: "exportd::lifecycle", "exportd listening on http://{local}");
            exportd::server::serve(listener, app_router(state), shutdown.clone()).await;
            let _ = scheduler.await;
            if let Some((task, delivery)) = worker_task {
                let _ = task.await;
                let _ = delivery.await;
            }
            Ok(())
        }
    }
}
