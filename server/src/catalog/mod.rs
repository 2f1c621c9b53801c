//! The catalog (contract §12): the reports an export reads and the datasets an import writes,
//! declared in a TOML file instead of in code. This module reads a catalog file into one typed
//! model and checks everything that can be checked without the source database: unknown keys
//! and types, names, duplicates, roles, the tenant expression, keys, references and what each
//! type needs. Every error names its line and column in the file.
//!
//! `catalog/demo.toml` is the built-in catalog ([`DEMO`]): the demo's `orders` and `customers`.

pub mod format;
pub mod placeholders;
pub mod source;

pub use format::{parse, CatalogError};

use serde::Serialize;

/// The built-in catalog, loaded when `EXPORTD_CATALOG` is not set.
pub const DEMO: &str = include_str!("../../../catalog/demo.toml");

/// The name the built-in catalog's errors are reported under.
pub const DEMO_NAME: &str = "catalog/demo.toml";

/// A catalog: its reports and datasets, checked, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// The reports.
    pub reports: Vec<Report>,
    /// The datasets.
    pub datasets: Vec<Dataset>,
    /// The query that gives a signed-in subject's role in a tenant (contract §13), if any.
    pub authority_sql: Option<String>,
    /// Where `[authority] sql` is in the file, for the errors the source finds in it.
    pub authority_at: Place,
}

/// Where a value is in the catalog's file, for the errors the source finds in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Place {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

/// A name and its translations, for the page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Title {
    /// English.
    pub en: Option<String>,
    /// Arabic.
    pub ar: Option<String>,
}

impl Title {
    /// The title in `language` (`en` or `ar`): that translation, else English, else `name`.
    pub fn in_language<'a>(&'a self, language: &str, name: &'a str) -> &'a str {
        let translated = if language == "ar" { self.ar.as_deref() } else { None };
        translated.or(self.en.as_deref()).unwrap_or(name)
    }
}

/// How an instant is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnit {
    /// A timestamp type of the database.
    Instant,
    /// Epoch milliseconds in an integer column.
    Ms,
}

/// How a column's cells are read and written (contract §12's types).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ColumnType {
    /// Free text; defused against formula injection when written.
    Text,
    /// A whole number.
    Integer,
    /// A decimal number with `scale` places.
    Decimal {
        /// Places after the point.
        scale: u32,
    },
    /// Money in minor units, written in major units with its currency's places.
    Money {
        /// The SQL expression of the row's ISO 4217 code; two places when absent.
        currency: Option<String>,
    },
    /// A day, `YYYY-MM-DD`.
    Date,
    /// An instant, written RFC 3339 UTC.
    Timestamp {
        /// How it is stored.
        unit: TimeUnit,
    },
    /// `true` or `false`.
    Boolean,
}

/// One column of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    /// Its name in requests and in the header row.
    pub name: String,
    /// The SQL expression that reads it.
    pub sql: String,
    /// Its type.
    #[serde(flatten)]
    pub ty: ColumnType,
    /// Personal data: only roles that may read PII get it.
    pub pii: bool,
    /// Its title on the page.
    #[serde(skip)]
    pub title: Title,
    /// Where its SQL is in the file.
    #[serde(skip)]
    pub at: Place,
}

/// What values a filter takes and how it selects rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FilterTest {
    /// A non-empty list of the listed values.
    OneOf {
        /// The values it may name.
        values: Vec<String>,
    },
    /// A non-empty list of ISO 3166-1 alpha-2 codes.
    Countries,
    /// One value of type `of`.
    Equals {
        /// The value's type.
        #[serde(flatten)]
        of: FilterValue,
    },
    /// The column is at least one value of type `of`.
    AtLeast {
        /// The value's type.
        #[serde(flatten)]
        of: FilterValue,
    },
    /// The column is at most one value of type `of`.
    AtMost {
        /// The value's type.
        #[serde(flatten)]
        of: FilterValue,
    },
}

/// The type of a filter's one value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "of", rename_all = "snake_case")]
pub enum FilterValue {
    /// Text.
    Text,
    /// A whole number.
    Integer,
    /// A decimal number.
    Decimal,
    /// A money amount in major units, compared per row in its currency's places.
    Money {
        /// The SQL expression of the row's currency; two places when absent.
        currency: Option<String>,
    },
    /// A day.
    Date,
    /// `true` or `false`.
    Boolean,
}

/// One filter of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Filter {
    /// Its name in requests.
    pub name: String,
    /// The SQL expression it tests.
    pub sql: String,
    /// Its values and test.
    #[serde(flatten)]
    pub test: FilterTest,
    /// Where its SQL is in the file.
    #[serde(skip)]
    pub at: Place,
}

/// The roles that may export a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Roles {
    /// Admins may.
    pub admin: bool,
    /// Analysts may.
    pub analyst: bool,
}

/// A report that can be exported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Its name.
    pub name: String,
    /// Its title on the page.
    #[serde(skip)]
    pub title: Title,
    /// The SQL `FROM` clause: a table, and the joins that complete each row.
    pub from: String,
    /// The SQL expression compared with the tenant's source id in every query.
    pub tenant: String,
    /// The SQL expression of the key the file is ordered by.
    pub key: String,
    /// The SQL expression the time range applies to.
    pub time_sql: String,
    /// How the time is stored.
    pub time_unit: TimeUnit,
    /// Who may export it.
    pub roles: Roles,
    /// The columns, in file order.
    pub columns: Vec<Column>,
    /// The filters.
    pub filters: Vec<Filter>,
    /// Where its `from`, `tenant`, `key` and `time.sql` are in the file.
    #[serde(skip)]
    pub at: ReportPlaces,
}

/// Where a report's SQL is in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportPlaces {
    /// `from`.
    pub from: Place,
    /// `tenant` (the report itself when it has none).
    pub tenant: Place,
    /// `key`.
    pub key: Place,
    /// `time.sql`.
    pub time: Place,
}

impl Roles {
    /// Whether `role` is one of them.
    pub fn allows(self, role: crate::auth::Role) -> bool {
        match role {
            crate::auth::Role::Admin => self.admin,
            crate::auth::Role::Analyst => self.analyst,
            crate::auth::Role::Viewer => false,
        }
    }
}

impl Report {
    /// The column of this name.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The filter of this name.
    pub fn filter(&self, name: &str) -> Option<&Filter> {
        self.filters.iter().find(|f| f.name == name)
    }

    /// Whether these columns include a PII column; `None` if one is not a column of the report.
    pub fn needs_pii(&self, columns: &[String]) -> Option<bool> {
        columns.iter().try_fold(false, |pii, name| self.column(name).map(|c| pii || c.pii))
    }

    /// Whether `role` may export these columns of the report: a role the report names, and one
    /// that may read PII when a column is PII. `false` for a column the report does not have.
    pub fn covers(&self, role: crate::auth::Role, columns: &[String]) -> bool {
        self.roles.allows(role) && self.needs_pii(columns).is_some_and(|pii| role.may_export_contract(pii))
    }

    /// The schema version (contract §12): the SHA-256 of the RFC 8785 JSON of the definition,
    /// defaults filled in, titles left out.
    pub fn digest(&self) -> String {
        digest_of(self)
    }
}

/// How a key's cells are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    /// As they are.
    Exact,
    /// Trimmed and lower-cased, as email addresses.
    Email,
}

/// One part of a dataset's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyPart {
    /// The file's column it is read from.
    pub name: String,
    /// The stored column the compared form is kept in.
    pub column: String,
    /// How it is compared.
    pub compare: Compare,
    /// Where its `column` is in the file.
    #[serde(skip)]
    pub at: Place,
}

/// A named check of a text cell, beyond its length and pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TextFormat {
    /// An email address.
    Email,
    /// An assigned ISO 3166-1 alpha-2 code.
    Country,
    /// An ISO 4217 code: three capital letters.
    Currency,
}

/// Another dataset's key that a file's column names: the cell is looked up by that key in the
/// tenant, and the found row's `store` column fills this column's stored column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reference {
    /// The dataset referred to.
    pub dataset: String,
    /// The name of its key part that the cell gives.
    pub key: String,
    /// The column of the referred dataset's table whose value is stored (its id, say).
    pub store: String,
}

/// One column a file of a dataset may have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatasetColumn {
    /// Its name in the header row.
    pub name: String,
    /// The stored column it fills (for a reference: with the referred row's `store` column).
    pub column: String,
    /// Its type.
    #[serde(flatten)]
    pub ty: ColumnType,
    /// Non-empty when a row is created.
    pub required: bool,
    /// The most characters a text cell may have.
    pub max_chars: u32,
    /// A regular expression the whole cell matches.
    pub pattern: Option<String>,
    /// The values a cell may be, when listed.
    pub values: Option<Vec<String>>,
    /// A named check of a text cell.
    pub format: Option<TextFormat>,
    /// The key of another dataset it names.
    pub references: Option<Reference>,
    /// Where its `column` is in the file.
    #[serde(skip)]
    pub at: Place,
}

/// A dataset an import writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dataset {
    /// Its name.
    pub name: String,
    /// Its title on the page.
    #[serde(skip)]
    pub title: Title,
    /// The table it writes.
    pub table: String,
    /// The table's tenant column.
    pub tenant: String,
    /// Its key: a row of the file updates the stored row with the same key, or creates one.
    pub key: Vec<KeyPart>,
    /// The columns a file may have.
    pub columns: Vec<DatasetColumn>,
    /// Columns the matching report writes that an import cannot set.
    pub ignore: Vec<String>,
    /// SQL run in each batch's transaction after its writes.
    pub after_batch: Option<String>,
    /// Where its `table` is in the file.
    #[serde(skip)]
    pub at: Place,
}

impl Dataset {
    /// The column of this name.
    pub fn column(&self, name: &str) -> Option<&DatasetColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The schema version, as [`Report::digest`].
    pub fn digest(&self) -> String {
        digest_of(self)
    }
}

impl Catalog {
    /// The built-in catalog.
    pub fn demo() -> Result<Catalog, Vec<CatalogError>> {
        parse(DEMO_NAME, DEMO)
    }

    /// The built-in catalog, for a configuration built in code (tests, defaults); a test holds
    /// it free of errors, and a process started from the command line checks it before use.
    pub fn builtin() -> std::sync::Arc<Catalog> {
        static BUILTIN: std::sync::LazyLock<std::sync::Arc<Catalog>> =
            std::sync::LazyLock::new(|| std::sync::Arc::new(Catalog::demo().unwrap_or(Catalog { reports: Vec::new(), datasets: Vec::new(), authority_sql: None, authority_at: Place::default() })));
        BUILTIN.clone()
    }

    /// Reads and checks the catalog file `path`, or the built-in one when `None`: its name (for
    /// errors) and the catalog, or every error found.
    pub fn load(path: Option<&str>) -> Result<(String, Catalog), Vec<CatalogError>> {
        match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| vec![CatalogError::whole_file(path, &e.to_string())])?;
                Ok((path.to_owned(), parse(path, &text)?))
            }
            None => Ok((DEMO_NAME.to_owned(), Catalog::demo()?)),
        }
    }

    /// Every schema version this catalog holds: its reports' and datasets' digests.
    pub fn digests(&self) -> Vec<String> {
        self.reports.iter().map(Report::digest).chain(self.datasets.iter().map(Dataset::digest)).collect()
    }

    /// The report of this name.
    pub fn report(&self, name: &str) -> Option<&Report> {
        self.reports.iter().find(|r| r.name == name)
    }

    /// The dataset of this name.
    pub fn dataset(&self, name: &str) -> Option<&Dataset> {
        self.datasets.iter().find(|d| d.name == name)
    }
}

/// The hex SHA-256 of the canonical JSON of `definition`.
fn digest_of(definition: &impl Serialize) -> String {
    use sha2::{Digest, Sha256};
    let value = serde_json::to_value(definition).unwrap_or(serde_json::Value::Null);
    hex::encode(Sha256::digest(crate::service::canonical::canonical_json(&value).as_bytes()))
}

#[cfg(test)]
mod tests;
