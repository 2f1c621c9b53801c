//! Reading a catalog file: TOML into the raw shape of the file (every value with where it was),
//! then into the checked model, collecting every error with its line and column.
//!
//! A key the format does not know, or a value of the wrong TOML type, is the parser's error: the
//! first one ends the reading. Everything after (names, types, roles, keys, references) is
//! checked in full, so one run lists every such error.

use super::{Catalog, Column, Place, ReportPlaces, ColumnType, Compare, Dataset, DatasetColumn, Filter, FilterTest, FilterValue, KeyPart, Reference, Report, Roles, TextFormat, TimeUnit, Title};
use serde::Deserialize;
use std::collections::HashSet;
use std::ops::Range;
use toml::Spanned;

/// One thing wrong with a catalog, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogError {
    /// The file, as named to [`parse`].
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl CatalogError {
    /// An error of the whole file (it cannot be read), placed at its start.
    pub fn whole_file(file: &str, message: &str) -> CatalogError {
        CatalogError { file: file.to_owned(), line: 1, column: 1, message: message.to_owned() }
    }
}

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.column, self.message)
    }
}

type S = Spanned<String>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCatalog {
    #[serde(default)]
    report: Vec<Spanned<RawReport>>,
    #[serde(default)]
    dataset: Vec<Spanned<RawDataset>>,
    authority: Option<Spanned<RawAuthority>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTitle {
    en: Option<String>,
    ar: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReport {
    name: S,
    title: Option<RawTitle>,
    from: S,
    tenant: Option<S>,
    key: S,
    time: Spanned<RawTime>,
    roles: Option<Spanned<Vec<S>>>,
    columns: Spanned<Vec<Spanned<RawColumn>>>,
    #[serde(default)]
    filters: Vec<Spanned<RawFilter>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTime {
    sql: S,
    unit: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawColumn {
    name: S,
    sql: S,
    #[serde(rename = "type")]
    ty: S,
    scale: Option<Spanned<i64>>,
    currency: Option<S>,
    unit: Option<S>,
    pii: Option<bool>,
    title: Option<RawTitle>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    name: S,
    sql: S,
    #[serde(rename = "type")]
    ty: S,
    values: Option<Spanned<Vec<String>>>,
    of: Option<S>,
    currency: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDataset {
    name: S,
    title: Option<RawTitle>,
    table: S,
    tenant: Option<S>,
    key: Spanned<Vec<Spanned<RawKeyPart>>>,
    columns: Spanned<Vec<Spanned<RawDatasetColumn>>>,
    #[serde(default)]
    ignore: Vec<S>,
    after_batch: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeyPart {
    name: S,
    column: S,
    compare: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatasetColumn {
    name: S,
    column: S,
    #[serde(rename = "type")]
    ty: S,
    scale: Option<Spanned<i64>>,
    currency: Option<S>,
    unit: Option<S>,
    required: Option<bool>,
    max_chars: Option<Spanned<i64>>,
    pattern: Option<S>,
    values: Option<Spanned<Vec<String>>>,
    format: Option<S>,
    references: Option<Spanned<RawReference>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReference {
    dataset: S,
    key: S,
    store: S,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuthority {
    sql: S,
}

/// The longest text cell of a dataset column that does not say.
pub const MAX_CHARS_DEFAULT: u32 = 1_000;

/// The most places a decimal may have.
pub const SCALE_MAX: i64 = 18;

/// Reads and checks the catalog `text` of the file `file`: the model, or every error found.
pub fn parse(file: &str, text: &str) -> Result<Catalog, Vec<CatalogError>> {
    let mut check = Check { file, text, errors: Vec::new() };
    let raw: RawCatalog = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            check.at(e.span().unwrap_or(0..0), e.message().trim_end().to_owned());
            return Err(check.errors);
        }
    };
    if raw.report.is_empty() && raw.dataset.is_empty() {
        check.at(0..0, "the catalog declares no report and no dataset");
    }
    let reports = check.reports(raw.report);
    let datasets = check.datasets(raw.dataset);
    let mut authority_at = Place::default();
    let authority_sql = raw.authority.map(|a| {
        let sql = a.into_inner().sql;
        authority_at = check.place(sql.span());
        check.not_empty(&sql, "`[authority] sql`");
        check.placeholders(&sql, "`[authority] sql`", &["tenant", "subject"]);
        sql.into_inner()
    });
    if check.errors.is_empty() {
        Ok(Catalog { reports, datasets, authority_sql, authority_at })
    } else {
        Err(check.errors)
    }
}

/// The errors found so far in one file.
struct Check<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<CatalogError>,
}

impl Check<'_> {
    /// The line and column where `span` starts.
    fn place(&self, span: Range<usize>) -> Place {
        let start = span.start.min(self.text.len());
        let before = self.text.get(..start).unwrap_or_default();
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
        Place { line, column }
    }

    /// Records `message` at the start of `span`.
    fn at(&mut self, span: Range<usize>, message: impl Into<String>) {
        let Place { line, column } = self.place(span);
        self.errors.push(CatalogError { file: self.file.to_owned(), line, column, message: message.into() });
    }

    /// Checks a report's, dataset's, column's or filter's name: `[a-z][a-z0-9_]{0,62}`.
    fn name(&mut self, name: &S, what: &str) {
        let n = name.get_ref();
        let mut chars = n.chars();
        let shaped = chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') && n.len() <= 63;
        if !shaped {
            self.at(name.span(), format!("{what} name {n:?} is not a lower-case letter followed by up to 62 lower-case letters, digits or `_`"));
        }
    }

    /// Checks that an SQL expression or a table is not blank.
    /// Checks that `sql` uses only the placeholders `allowed` (contract §12).
    fn placeholders(&mut self, sql: &S, what: &str, allowed: &[&str]) {
        match super::placeholders::used(sql.get_ref()) {
            Err(e) => self.at(sql.span(), format!("{what}: {e}")),
            Ok(names) => {
                if let Some(other) = names.iter().find(|n| !allowed.contains(&n.as_str())) {
                    let list: Vec<String> = allowed.iter().map(|a| format!(":{a}")).collect();
                    self.at(sql.span(), format!("{what}: :{other} has no value here; it may use {}", list.join(", ")));
                }
            }
        }
    }

    fn not_empty(&mut self, value: &S, what: &str) {
        if value.get_ref().trim().is_empty() {
            self.at(value.span(), format!("{what} is empty"));
        }
    }

    /// Records a duplicate among `names`.
    fn unique<'n>(&mut self, names: impl IntoIterator<Item = &'n S>, what: &str) {
        let mut seen = HashSet::new();
        for name in names {
            if !seen.insert(name.get_ref().as_str()) {
                self.at(name.span(), format!("{what} {:?} is declared twice", name.get_ref()));
            }
        }
    }

    fn unit(&mut self, unit: Option<&S>) -> TimeUnit {
        match unit.map(|u| u.get_ref().as_str()) {
            None | Some("instant") => TimeUnit::Instant,
            Some("ms") => TimeUnit::Ms,
            Some(other) => {
                let span = unit.map_or(0..0, |u| u.span());
                self.at(span, format!("unknown unit {other:?}; one of \"instant\", \"ms\""));
                TimeUnit::Instant
            }
        }
    }

    /// A column's type from its `type` and the keys that only some types take.
    fn column_type(&mut self, ty: &S, scale: Option<&Spanned<i64>>, currency: Option<&S>, unit: Option<&S>) -> Option<ColumnType> {
        let name = ty.get_ref().as_str();
        let only = |key: &str, of: &str| format!("`{key}` applies only to type \"{of}\", not {name:?}");
        if name != "decimal" {
            if let Some(scale) = scale {
                self.at(scale.span(), only("scale", "decimal"));
            }
        }
        if name != "money" {
            if let Some(currency) = currency {
                self.at(currency.span(), only("currency", "money"));
            }
        }
        if name != "timestamp" {
            if let Some(unit) = unit {
                self.at(unit.span(), only("unit", "timestamp"));
            }
        }
        Some(match name {
            "text" => ColumnType::Text,
            "integer" => ColumnType::Integer,
            "date" => ColumnType::Date,
            "boolean" => ColumnType::Boolean,
            "decimal" => match scale {
                Some(s) if (0..=SCALE_MAX).contains(s.get_ref()) => ColumnType::Decimal { scale: *s.get_ref() as u32 },
                Some(s) => {
                    self.at(s.span(), format!("`scale` must be from 0 to {SCALE_MAX}"));
                    return None;
                }
                None => {
                    self.at(ty.span(), "type \"decimal\" needs a `scale`");
                    return None;
                }
            },
            "money" => ColumnType::Money { currency: currency.map(|c| c.get_ref().clone()) },
            "timestamp" => ColumnType::Timestamp { unit: self.unit(unit) },
            other => {
                self.at(ty.span(), format!("unknown type {other:?}; one of \"text\", \"integer\", \"decimal\", \"money\", \"date\", \"timestamp\", \"boolean\""));
                return None;
            }
        })
    }

    fn reports(&mut self, raw: Vec<Spanned<RawReport>>) -> Vec<Report> {
        self.unique(raw.iter().map(|r| &r.get_ref().name), "report");
        raw.into_iter().filter_map(|r| self.report(r)).collect()
    }

    fn report(&mut self, raw: Spanned<RawReport>) -> Option<Report> {
        let at = raw.span();
        let r = raw.into_inner();
        self.name(&r.name, "report");
        let what = format!("report {:?}", r.name.get_ref());
        self.not_empty(&r.from, &format!("{what}: `from`"));
        self.not_empty(&r.key, &format!("{what}: `key`"));
        let tenant = match &r.tenant {
            Some(t) => {
                self.not_empty(t, &format!("{what}: `tenant`"));
                t.get_ref().clone()
            }
            None => {
                self.at(at.clone(), format!("{what} has no `tenant`: every query compares it with the tenant's source id"));
                String::new()
            }
        };
        let places = ReportPlaces {
            from: self.place(r.from.span()),
            tenant: r.tenant.as_ref().map_or_else(|| self.place(at.clone()), |t| self.place(t.span())),
            key: self.place(r.key.span()),
            time: self.place(r.time.get_ref().sql.span()),
        };
        let time = r.time.into_inner();
        self.not_empty(&time.sql, &format!("{what}: `time.sql`"));
        let time_unit = self.unit(time.unit.as_ref());
        let roles = match &r.roles {
            None => Roles { admin: true, analyst: true },
            Some(listed) => {
                let mut roles = Roles { admin: false, analyst: false };
                for role in listed.get_ref() {
                    match role.get_ref().as_str() {
                        "admin" => roles.admin = true,
                        "analyst" => roles.analyst = true,
                        other => self.at(role.span(), format!("{what}: role {other:?} may not export; `roles` lists \"admin\" and \"analyst\" only")),
                    }
                }
                if listed.get_ref().is_empty() {
                    self.at(listed.span(), format!("{what}: `roles` is empty, so no one could export it"));
                }
                roles
            }
        };
        if r.columns.get_ref().is_empty() {
            self.at(r.columns.span(), format!("{what} has no columns"));
        }
        self.unique(r.columns.get_ref().iter().map(|c| &c.get_ref().name), &format!("{what}: column"));
        let columns: Vec<Column> = r.columns.into_inner().into_iter().filter_map(|c| {
            let c = c.into_inner();
            self.name(&c.name, "column");
            self.not_empty(&c.sql, &format!("column {:?}: `sql`", c.name.get_ref()));
            let ty = self.column_type(&c.ty, c.scale.as_ref(), c.currency.as_ref(), c.unit.as_ref())?;
            let at = self.place(c.sql.span());
            Some(Column { name: c.name.into_inner(), sql: c.sql.into_inner(), ty, pii: c.pii.unwrap_or(false), title: title(c.title), at })
        }).collect();
        self.unique(r.filters.iter().map(|f| &f.get_ref().name), &format!("{what}: filter"));
        let filters: Vec<Filter> = r.filters.into_iter().filter_map(|f| self.filter(f.into_inner())).collect();
        Some(Report {
            name: r.name.into_inner(),
            title: title(r.title),
            from: r.from.into_inner(),
            tenant,
            key: r.key.into_inner(),
            time_sql: time.sql.into_inner(),
            time_unit,
            roles,
            columns,
            filters,
            at: places,
        })
    }

    fn filter(&mut self, f: RawFilter) -> Option<Filter> {
        self.name(&f.name, "filter");
        let what = format!("filter {:?}", f.name.get_ref());
        self.not_empty(&f.sql, &format!("{what}: `sql`"));
        let kind = f.ty.get_ref().as_str();
        if kind != "one_of" {
            if let Some(values) = &f.values {
                self.at(values.span(), format!("{what}: `values` applies only to type \"one_of\""));
            }
        }
        let needs_one = matches!(kind, "equals" | "at_least" | "at_most");
        if !needs_one {
            if let Some(of) = &f.of {
                self.at(of.span(), format!("{what}: `of` applies only to types \"equals\", \"at_least\" and \"at_most\""));
            }
        }
        let test = match kind {
            "one_of" => match f.values {
                Some(values) if !values.get_ref().is_empty() => FilterTest::OneOf { values: values.into_inner() },
                Some(values) => {
                    self.at(values.span(), format!("{what}: `values` is empty"));
                    return None;
                }
                None => {
                    self.at(f.ty.span(), format!("{what}: type \"one_of\" needs `values`"));
                    return None;
                }
            },
            "countries" => FilterTest::Countries,
            "equals" | "at_least" | "at_most" => {
                let default = if kind == "equals" { "text" } else { "integer" };
                let of = match f.of.as_ref().map_or(default, |o| o.get_ref().as_str()) {
                    "text" if kind == "equals" => FilterValue::Text,
                    "integer" => FilterValue::Integer,
                    "decimal" => FilterValue::Decimal,
                    "money" => FilterValue::Money { currency: f.currency.as_ref().map(|c| c.get_ref().clone()) },
                    "date" => FilterValue::Date,
                    "boolean" if kind == "equals" => FilterValue::Boolean,
                    other => {
                        let span = f.of.as_ref().map_or(f.ty.span(), |o| o.span());
                        self.at(span, format!("{what}: `of` {other:?} is not a type it can compare"));
                        return None;
                    }
                };
                match kind {
                    "equals" => FilterTest::Equals { of },
                    "at_least" => FilterTest::AtLeast { of },
                    _ => FilterTest::AtMost { of },
                }
            }
            other => {
                self.at(f.ty.span(), format!("{what}: unknown type {other:?}; one of \"one_of\", \"countries\", \"equals\", \"at_least\", \"at_most\""));
                return None;
            }
        };
        if let (Some(currency), false) = (&f.currency, matches!(test, FilterTest::Equals { of: FilterValue::Money { .. } } | FilterTest::AtLeast { of: FilterValue::Money { .. } } | FilterTest::AtMost { of: FilterValue::Money { .. } })) {
            self.at(currency.span(), format!("{what}: `currency` applies only to `of = \"money\"`"));
        }
        let at = self.place(f.sql.span());
        Some(Filter { name: f.name.into_inner(), sql: f.sql.into_inner(), test, at })
    }

    fn datasets(&mut self, raw: Vec<Spanned<RawDataset>>) -> Vec<Dataset> {
        self.unique(raw.iter().map(|d| &d.get_ref().name), "dataset");
        // References are checked against every dataset's keys, declared before or after.
        let keys: Vec<(String, Vec<String>)> = raw.iter().map(|d| (d.get_ref().name.get_ref().clone(), d.get_ref().key.get_ref().iter().map(|k| k.get_ref().name.get_ref().clone()).collect())).collect();
        raw.into_iter().filter_map(|d| self.dataset(d, &keys)).collect()
    }

    fn dataset(&mut self, raw: Spanned<RawDataset>, keys: &[(String, Vec<String>)]) -> Option<Dataset> {
        let at = raw.span();
        let d = raw.into_inner();
        self.name(&d.name, "dataset");
        let what = format!("dataset {:?}", d.name.get_ref());
        self.not_empty(&d.table, &format!("{what}: `table`"));
        let tenant = match &d.tenant {
            Some(t) => {
                self.not_empty(t, &format!("{what}: `tenant`"));
                t.get_ref().clone()
            }
            None => {
                self.at(at, format!("{what} has no `tenant`: every write names the tenant's source id"));
                String::new()
            }
        };
        self.unique(d.columns.get_ref().iter().map(|c| &c.get_ref().name), &format!("{what}: column"));
        let names: HashSet<String> = d.columns.get_ref().iter().map(|c| c.get_ref().name.get_ref().clone()).collect();
        if d.key.get_ref().is_empty() {
            self.at(d.key.span(), format!("{what}: `key` is empty"));
        }
        self.unique(d.key.get_ref().iter().map(|k| &k.get_ref().name), &format!("{what}: key part"));
        let text_columns: HashSet<&str> = d.columns.get_ref().iter().filter(|c| c.get_ref().ty.get_ref() == "text").map(|c| c.get_ref().name.get_ref().as_str()).collect();
        // A key is compared and bound as its text: an instant or a boolean has no one text.
        let unkeyable: HashSet<&str> = d.columns.get_ref().iter().filter(|c| matches!(c.get_ref().ty.get_ref().as_str(), "timestamp" | "boolean")).map(|c| c.get_ref().name.get_ref().as_str()).collect();
        let key: Vec<KeyPart> = d.key.into_inner().into_iter().map(|k| {
            let k = k.into_inner();
            if !names.contains(k.name.get_ref()) {
                self.at(k.name.span(), format!("{what}: key {:?} is not one of its columns", k.name.get_ref()));
            }
            if unkeyable.contains(k.name.get_ref().as_str()) {
                self.at(k.name.span(), format!("{what}: key {:?} is a timestamp or a boolean; a key is text, integer, decimal, money or date", k.name.get_ref()));
            }
            self.not_empty(&k.column, &format!("{what}: key {:?}: `column`", k.name.get_ref()));
            let compare = match k.compare.as_ref().map(|c| c.get_ref().as_str()) {
                None | Some("exact") => Compare::Exact,
                Some("email") => {
                    if names.contains(k.name.get_ref()) && !text_columns.contains(k.name.get_ref().as_str()) {
                        let span = k.compare.as_ref().map_or(0..0, |c| c.span());
                        self.at(span, format!("{what}: key {:?} is compared as an email but is not of type \"text\"", k.name.get_ref()));
                    }
                    Compare::Email
                }
                Some(other) => {
                    let span = k.compare.as_ref().map_or(0..0, |c| c.span());
                    self.at(span, format!("{what}: unknown `compare` {other:?}; one of \"exact\", \"email\""));
                    Compare::Exact
                }
            };
            let at = self.place(k.column.span());
            KeyPart { name: k.name.into_inner(), column: k.column.into_inner(), compare, at }
        }).collect();
        if d.columns.get_ref().is_empty() {
            self.at(d.columns.span(), format!("{what} has no columns"));
        }
        for c in d.columns.get_ref() {
            if let Some(currency) = c.get_ref().currency.as_ref().filter(|_| c.get_ref().ty.get_ref() == "money") {
                if !names.contains(currency.get_ref()) {
                    self.at(currency.span(), format!("{what}: column {:?}: `currency` names the column of the file that gives the row's currency, and {:?} is not one", c.get_ref().name.get_ref(), currency.get_ref()));
                }
            }
        }
        let columns: Vec<DatasetColumn> = d.columns.into_inner().into_iter().filter_map(|c| self.dataset_column(c.into_inner(), &what, keys)).collect();
        for ignored in &d.ignore {
            if names.contains(ignored.get_ref()) {
                self.at(ignored.span(), format!("{what}: {:?} is both a column and ignored", ignored.get_ref()));
            }
        }
        if let Some(after) = &d.after_batch {
            self.not_empty(after, &format!("{what}: `after_batch`"));
            self.placeholders(after, &format!("{what}: `after_batch`"), &["tenant", "keys", "refs"]);
        }
        let table_at = self.place(d.table.span());
        Some(Dataset {
            at: table_at,
            name: d.name.into_inner(),
            title: title(d.title),
            table: d.table.into_inner(),
            tenant,
            key,
            columns,
            ignore: d.ignore.into_iter().map(Spanned::into_inner).collect(),
            after_batch: d.after_batch.map(Spanned::into_inner),
        })
    }

    fn dataset_column(&mut self, c: RawDatasetColumn, dataset: &str, keys: &[(String, Vec<String>)]) -> Option<DatasetColumn> {
        self.name(&c.name, "column");
        let what = format!("{dataset}: column {:?}", c.name.get_ref());
        self.not_empty(&c.column, &format!("{what}: `column`"));
        let ty = self.column_type(&c.ty, c.scale.as_ref(), c.currency.as_ref(), c.unit.as_ref())?;
        let text = ty == ColumnType::Text;
        let max_chars = match &c.max_chars {
            None => MAX_CHARS_DEFAULT,
            Some(n) if (1..=i64::from(u32::MAX)).contains(n.get_ref()) => *n.get_ref() as u32,
            Some(n) => {
                self.at(n.span(), format!("{what}: `max_chars` must be from 1 to {}", u32::MAX));
                MAX_CHARS_DEFAULT
            }
        };
        if let Some(pattern) = &c.pattern {
            if let Err(e) = pattern_regex(pattern.get_ref()) {
                self.at(pattern.span(), format!("{what}: `pattern` is not a regular expression: {}", e.to_string().lines().last().unwrap_or_default()));
            }
        }
        for (key, given) in [("max_chars", c.max_chars.as_ref().map(Spanned::span)), ("pattern", c.pattern.as_ref().map(Spanned::span)), ("values", c.values.as_ref().map(Spanned::span)), ("format", c.format.as_ref().map(Spanned::span))] {
            if let (Some(span), false) = (given, text) {
                self.at(span, format!("{what}: `{key}` applies only to type \"text\""));
            }
        }
        if let Some(values) = &c.values {
            if values.get_ref().is_empty() {
                self.at(values.span(), format!("{what}: `values` is empty"));
            }
        }
        let format = match c.format.as_ref().map(|f| f.get_ref().as_str()) {
            None => None,
            Some("email") => Some(TextFormat::Email),
            Some("country") => Some(TextFormat::Country),
            Some("currency") => Some(TextFormat::Currency),
            Some(other) => {
                let span = c.format.as_ref().map_or(0..0, |f| f.span());
                self.at(span, format!("{what}: unknown `format` {other:?}; one of \"email\", \"country\", \"currency\""));
                None
            }
        };
        let references = c.references.map(|r| {
            let span = r.span();
            let r = r.into_inner();
            match keys.iter().find(|(name, _)| name == r.dataset.get_ref()) {
                None => self.at(r.dataset.span(), format!("{what}: references dataset {:?}, which is not declared", r.dataset.get_ref())),
                Some((_, parts)) if !parts.contains(r.key.get_ref()) => {
                    self.at(r.key.span(), format!("{what}: {:?} is not a key of dataset {:?}", r.key.get_ref(), r.dataset.get_ref()));
                }
                Some((_, parts)) if parts.len() > 1 => {
                    self.at(r.key.span(), format!("{what}: dataset {:?} has a key of {} parts; one cell names a row only by a key of one", r.dataset.get_ref(), parts.len()));
                }
                Some(_) => {}
            }
            if !text {
                self.at(span, format!("{what}: a reference is read as text; its type must be \"text\""));
            }
            self.not_empty(&r.store, &format!("{what}: `references.store`"));
            Reference { dataset: r.dataset.into_inner(), key: r.key.into_inner(), store: r.store.into_inner() }
        });
        let at = self.place(c.column.span());
        Some(DatasetColumn {
            at,
            name: c.name.into_inner(),
            column: c.column.into_inner(),
            ty,
            required: c.required.unwrap_or(false),
            max_chars,
            pattern: c.pattern.map(Spanned::into_inner),
            values: c.values.map(Spanned::into_inner),
            format,
            references,
        })
    }
}

fn title(raw: Option<RawTitle>) -> Title {
    let raw = raw.unwrap_or_default();
    Title { en: raw.en, ar: raw.ar }
}

/// A dataset column's `pattern` as a regular expression matched against the whole cell, with
/// ASCII classes: `\d`, `\w` and `\s` (and their negations) mean ASCII digits, word characters
/// and spaces, whatever the cell's script.
pub fn pattern_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    let mut ascii = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            ascii.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => ascii.push_str("[0-9]"),
            Some('D') => ascii.push_str("[^0-9]"),
            Some('w') => ascii.push_str("[0-9A-Za-z_]"),
            Some('W') => ascii.push_str("[^0-9A-Za-z_]"),
            Some('s') => ascii.push_str("[\\t\\n\\x0B\\f\\r ]"),
            Some('S') => ascii.push_str("[^\\t\\n\\x0B\\f\\r ]"),
            Some(other) => {
                ascii.push('\\');
                ascii.push(other);
            }
            None => ascii.push('\\'),
        }
    }
    regex::RegexBuilder::new(&format!("^(?:{ascii})$")).size_limit(1 << 20).build()
}
