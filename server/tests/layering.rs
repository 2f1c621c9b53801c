//! Dependencies point down (SPEC's service layer and the project's standards): the export
//! service, the job store, the worker, the stores and the links know no HTTP type and no adapter,
//! and the worker uses the job store's transitions, never the service's or a controller's helpers.

use std::path::{Path, PathBuf};

fn sources(under: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(under);
    if root.is_file() {
        return vec![root];
    }
    let mut found = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    assert!(!found.is_empty(), "no sources under {under}");
    found
}

fn offenders(under: &str, forbidden: &[&str]) -> Vec<String> {
    sources(under)
        .into_iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            forbidden.iter().filter(|f| text.contains(**f)).map(|f| format!("{} uses {f}", path.display())).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_service_the_job_store_the_worker_and_the_stores_know_no_http_type_and_no_adapter() {
    let http = ["axum", "crate::server", "crate::controllers", "HeaderMap", "leptos_axum"];
    let mut found = Vec::new();
    for layer in ["catalog", "service", "csv_cells.rs", "exports", "imports", "schedules", "xlsx_cells.rs", "xlsx_package.rs", "job_store", "worker", "storage", "links.rs", "clock.rs", "faults.rs", "operations.rs", "db.rs"] {
        found.extend(offenders(layer, &http));
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_worker_and_the_janitor_share_the_job_stores_transitions_not_the_services() {
    let found = offenders("worker", &["exports::service", "crate::error::AppError"]);
    assert!(found.is_empty(), "{found:#?}");
}

/// What a function awaits between opening a write transaction and ending it: each await there
/// must be one of the transaction's own statements (it names the transaction), never a store,
/// a network call or another lock. On SQLite a write transaction holds the database's one write
/// lock, which no one can take from a frozen holder (SPEC §4).
mod write_transactions {
    use syn::visit::Visit;

    /// Whether `node` names the identifier `name` anywhere.
    fn mentions<'a>(name: &str, visit: impl FnOnce(&mut Mentions<'_>)) -> bool {
        let mut m = Mentions { name, found: false };
        visit(&mut m);
        m.found
    }

    struct Mentions<'a> {
        name: &'a str,
        found: bool,
    }

    impl<'ast> Visit<'ast> for Mentions<'_> {
        fn visit_ident(&mut self, i: &'ast syn::Ident) {
            self.found |= i == self.name;
        }
    }

    /// The variable a statement binds to a new write transaction, if it opens one.
    fn opens(stmt: &syn::Stmt) -> Option<String> {
        struct Begins(bool);
        impl<'ast> Visit<'ast> for Begins {
            fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
                if let syn::Expr::Path(p) = &*c.func {
                    self.0 |= p.path.segments.last().is_some_and(|s| s.ident == "begin_write");
                }
                syn::visit::visit_expr_call(self, c);
            }
            fn visit_expr_method_call(&mut self, c: &'ast syn::ExprMethodCall) {
                self.0 |= c.method == "begin" || c.method == "begin_with_options";
                syn::visit::visit_expr_method_call(self, c);
            }
        }
        let syn::Stmt::Local(local) = stmt else { return None };
        let syn::Pat::Ident(name) = &local.pat else { return None };
        let mut begins = Begins(false);
        begins.visit_local(local);
        begins.0.then(|| name.ident.to_string())
    }

    /// Whether the statement itself (not a nested block) ends the transaction `txn`.
    fn ends(stmt: &syn::Stmt, txn: &str) -> bool {
        struct Ends<'a>(&'a str, bool);
        impl<'ast> Visit<'ast> for Ends<'_> {
            fn visit_expr_method_call(&mut self, c: &'ast syn::ExprMethodCall) {
                if (c.method == "commit" || c.method == "rollback") && matches!(&*c.receiver, syn::Expr::Path(p) if p.path.is_ident(self.0)) {
                    self.1 = true;
                }
                syn::visit::visit_expr_method_call(self, c);
            }
            fn visit_block(&mut self, _: &'ast syn::Block) {}
        }
        let mut e = Ends(txn, false);
        e.visit_stmt(stmt);
        e.1
    }

    /// The awaits of a statement outside its nested blocks, and its nested blocks.
    struct Shallow<'ast> {
        awaits: Vec<&'ast syn::ExprAwait>,
        blocks: Vec<&'ast syn::Block>,
    }

    impl<'ast> Visit<'ast> for Shallow<'ast> {
        fn visit_expr_await(&mut self, a: &'ast syn::ExprAwait) {
            self.awaits.push(a);
            syn::visit::visit_expr_await(self, a);
        }
        fn visit_block(&mut self, b: &'ast syn::Block) {
            self.blocks.push(b);
        }
        fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
    }

    /// Checks a block's statements in order, with `open` the transaction open when it starts.
    fn check_block(block: &syn::Block, mut open: Option<String>, where_: &str, found: &mut Vec<String>) {
        for stmt in &block.stmts {
            let mut shallow = Shallow { awaits: Vec::new(), blocks: Vec::new() };
            shallow.visit_stmt(stmt);
            if let Some(txn) = &open {
                for a in &shallow.awaits {
                    if !mentions(txn, |m| m.visit_expr(&a.base)) {
                        found.push(format!("{where_}: awaits something other than `{txn}`'s own statements while it is open"));
                    }
                }
            }
            for nested in shallow.blocks {
                check_block(nested, open.clone(), where_, found);
            }
            if let Some(txn) = &open {
                if ends(stmt, txn) {
                    open = None;
                }
            } else {
                open = opens(stmt);
            }
        }
    }

    /// Every function of `file` that awaits anything but its transaction's statements inside it.
    pub fn offenders(file: &syn::File, path: &str) -> Vec<String> {
        struct Functions<'a> {
            path: &'a str,
            found: Vec<String>,
        }
        impl<'ast> Visit<'ast> for Functions<'_> {
            fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
                check_block(&f.block, None, &format!("{} fn {}", self.path, f.sig.ident), &mut self.found);
                syn::visit::visit_item_fn(self, f);
            }
            fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
                check_block(&f.block, None, &format!("{} fn {}", self.path, f.sig.ident), &mut self.found);
                syn::visit::visit_impl_item_fn(self, f);
            }
        }
        let mut f = Functions { path, found: Vec::new() };
        f.visit_file(file);
        f.found
    }

    /// How many functions of `file` open a write transaction.
    pub fn openers(file: &syn::File) -> usize {
        struct Count(usize);
        impl<'ast> Visit<'ast> for Count {
            fn visit_block(&mut self, b: &'ast syn::Block) {
                self.0 += b.stmts.iter().filter(|s| opens(s).is_some()).count();
                syn::visit::visit_block(self, b);
            }
        }
        let mut c = Count(0);
        c.visit_file(file);
        c.0
    }
}

#[test]
fn no_write_transaction_awaits_a_store_a_network_call_or_another_lock_while_it_holds_the_write_lock() {
    let (mut found, mut openers) = (Vec::new(), 0);
    for path in sources("") {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        openers += write_transactions::openers(&file);
        found.extend(write_transactions::offenders(&file, &path.display().to_string()));
    }
    assert!(openers >= 6, "the check found the transactions it is about ({openers})");
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_write_transaction_check_finds_an_upload_awaited_inside_a_transaction() {
    let bad = syn::parse_file(
        "async fn release(db: &Db, store: &Store) -> R {
            let txn = begin_write(db).await?;
            update.exec(&txn).await?;
            if ok { store.put(key, bytes).await?; }
            txn.commit().await?;
            store.delete(key).await
        }",
    )
    .unwrap();
    let found = write_transactions::offenders(&bad, "example");
    assert_eq!(found.len(), 1, "{found:?}");
    let good = syn::parse_file(
        "async fn apply(db: &Db) -> R {
            let txn = begin_write(db).await?;
            let Some(row) = update.exec_with_returning(&txn).await?.pop() else { txn.rollback().await?; return current(db).await; };
            audit::record(&txn, &row).await?;
            txn.commit().await?;
            current(db).await
        }",
    )
    .unwrap();
    assert_eq!(write_transactions::offenders(&good, "example"), Vec::<String>::new());
}
