//! Reading an import's cells by its catalog dataset (contract §10, §12): which columns a file
//! may have and where each goes, how each cell is read by its column's type and checks, and the
//! code and message of every way it can be wrong. What needs the database (a reference to a row
//! the tenant does not have, a row the database refuses) is checked by the import job;
//! everything here is a pure function of the file and the catalog.

use crate::catalog::{Catalog, ColumnType, Compare, Dataset, DatasetColumn, TextFormat};
use crate::csv_cells::undefuse;
use crate::iso_codes::{currency_places, is_country};
use crate::service::ids::could_be_email;
use std::borrow::Cow;

/// Something wrong with a file or a cell: a code and a message for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The column it is about (empty for a whole record).
    pub column: String,
    /// A stable code (`invalid_email`, `invalid_<column>`, …).
    pub code: Cow<'static, str>,
    /// What a person reads.
    pub message: String,
}

impl Problem {
    /// A problem of `column`.
    pub fn new(column: &str, code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Problem {
        Problem { column: column.to_owned(), code: code.into(), message: message.into() }
    }
}

/// Where each column of a file's header goes.
#[derive(Debug, Clone)]
pub struct Header {
    /// For each position of the file's records: the index of its column in the dataset's
    /// `columns`, or `None` for an ignored column.
    pub slots: Vec<Option<usize>>,
    /// The positions to read a record's cells in: the money columns last, so the currency cell
    /// they are read by is read before them.
    order: Vec<usize>,
    /// Whether the cells are a CSV's, whose text an export defused (a workbook's are as stored).
    pub defused: bool,
}

impl Header {
    /// Reads a header row; a missing key column, an unknown column or a column named twice
    /// fails the whole file.
    pub fn read(dataset: &Dataset, names: &[&str]) -> Result<Header, Problem> {
        let mut slots = Vec::with_capacity(names.len());
        let mut seen: Vec<&str> = Vec::with_capacity(names.len());
        for (i, raw) in names.iter().enumerate() {
            // The first name may carry a BOM the reader did not take.
            let name = if i == 0 { raw.trim_start_matches('\u{feff}') } else { raw };
            let name = name.trim();
            if seen.contains(&name) {
                return Err(Problem::new(name, "duplicate_column", format!("the column {name:?} is named twice")));
            }
            seen.push(name);
            if let Some(at) = dataset.columns.iter().position(|c| c.name == name) {
                slots.push(Some(at));
            } else if dataset.ignore.iter().any(|i| i == name) {
                slots.push(None);
            } else {
                return Err(Problem::new(name, "unknown_column", format!("{name:?} is not a column of {}", dataset.name)));
            }
        }
        if let Some(missing) = dataset.key.iter().find(|k| !seen.contains(&k.name.as_str())) {
            let key = &missing.name;
            return Err(Problem::new(key, "missing_key_column", format!("the key column {key:?} is missing")));
        }
        let mut order: Vec<usize> = (0..slots.len()).collect();
        order.sort_by_key(|&i| slots[i].is_some_and(|c| matches!(dataset.columns[c].ty, ColumnType::Money { .. })));
        Ok(Header { slots, order, defused: true })
    }

    /// Whether the file has the dataset's column at `index`.
    pub fn has(&self, index: usize) -> bool {
        self.slots.contains(&Some(index))
    }
}

/// A cell read by its column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An empty cell of a column that is not text: stored as NULL.
    Null,
    /// Text as stored (an email trimmed; an empty text cell is empty text).
    Text(String),
    /// A whole number.
    Integer(i64),
    /// A decimal, written with exactly its column's scale.
    Decimal(String),
    /// Money in minor units.
    Money(i64),
    /// A day, `YYYY-MM-DD`.
    Date(String),
    /// An instant in epoch milliseconds, and whether the file gave a fraction of a second (an
    /// instant without one equals a stored one to the second).
    Instant(i64, bool),
    /// `true` or `false`.
    Boolean(bool),
}

impl Value {
    /// The text a key compares, by its compare rule; `None` for a value with none (empty).
    pub fn compared(&self, compare: Compare) -> Option<String> {
        let text = match self {
            Value::Null => return None,
            Value::Text(t) if t.is_empty() => return None,
            Value::Text(t) if compare == Compare::Email => return Some(migrations::email_key(t)),
            Value::Text(t) => t.clone(),
            Value::Integer(n) | Value::Money(n) => n.to_string(),
            Value::Decimal(d) | Value::Date(d) => d.clone(),
            Value::Instant(ms, _) => ms.to_string(),
            Value::Boolean(b) => b.to_string(),
        };
        Some(match compare {
            Compare::Exact => text,
            Compare::Email => migrations::email_key(&text),
        })
    }
}

fn has_control(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\r' | '\n'))
}

/// What a column's checks need beyond the catalog's model: its pattern, compiled once.
#[derive(Debug, Clone)]
pub struct Checks {
    patterns: Vec<Option<regex::Regex>>,
    /// Per column, whether it is a key part's (never empty).
    keys: Vec<bool>,
}

impl Checks {
    /// The compiled checks of `dataset`'s columns (a pattern the catalog check let through
    /// always compiles; one that did not is no check).
    pub fn of(dataset: &Dataset) -> Checks {
        Checks {
            patterns: dataset.columns.iter().map(|c| c.pattern.as_deref().and_then(|p| crate::catalog::format::pattern_regex(p).ok())).collect(),
            keys: dataset.columns.iter().map(|c| dataset.key.iter().any(|k| k.name == c.name)).collect(),
        }
    }
}

/// Reads one cell of a CSV's column at `index` (as the file has it, an export's defusing
/// undone); `places` are the minor unit's places of a money cell, by its row's currency.
pub fn read_cell(dataset: &Dataset, checks: &Checks, index: usize, raw: &str, places: u32) -> Result<Value, Problem> {
    read_value(dataset, checks, index, undefuse(raw), places)
}

/// Reads one cell of the column at `index` as it is.
fn read_value(dataset: &Dataset, checks: &Checks, index: usize, cell: &str, places: u32) -> Result<Value, Problem> {
    let column = &dataset.columns[index];
    let name = column.name.as_str();
    if has_control(cell) {
        return Err(Problem::new(name, "control_character", "a control character other than tab, CR or LF"));
    }
    let is_key = checks.keys.get(index).copied().unwrap_or(false);
    let email = column.format == Some(TextFormat::Email);
    let blank = if email { cell.trim().is_empty() } else { cell.is_empty() };
    if blank {
        if column.required || is_key {
            return Err(Problem::new(name, "missing_value", format!("{name} is required")));
        }
        return Ok(if column.ty == ColumnType::Text { Value::Text(String::new()) } else { Value::Null });
    }
    match &column.ty {
        ColumnType::Text => text(column, checks.patterns.get(index).and_then(Option::as_ref), cell),
        ColumnType::Integer => match cell.parse::<i64>() {
            Ok(n) if !cell.starts_with('+') => Ok(Value::Integer(n)),
            _ => Err(Problem::new(name, "invalid_integer", "a whole number such as -12")),
        },
        ColumnType::Decimal { scale } => decimal(cell, *scale).map(Value::Decimal).map_err(|code| Problem::new(name, code, format!("a decimal with at most {scale} places, such as -12.5"))),
        ColumnType::Money { .. } => minor_units(cell, places).map(Value::Money).map_err(|code| Problem::new(name, code, format!("an amount with at most {places} places, such as -12.50"))),
        ColumnType::Date => match jiff::civil::Date::strptime("%Y-%m-%d", cell) {
            Ok(day) if cell.len() == 10 => Ok(Value::Date(day.to_string())),
            _ => Err(Problem::new(name, "invalid_date", "a day as YYYY-MM-DD, such as 2026-01-31")),
        },
        ColumnType::Timestamp { .. } => match cell.parse::<jiff::Timestamp>() {
            Ok(ts) => Ok(Value::Instant(ts.as_millisecond(), cell.contains('.'))),
            Err(_) => Err(Problem::new(name, "invalid_instant", "an RFC 3339 instant with an offset, such as 2026-01-31T09:30:00+03:00")),
        },
        ColumnType::Boolean => match cell.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(Value::Boolean(true)),
            "false" | "0" => Ok(Value::Boolean(false)),
            _ => Err(Problem::new(name, "invalid_boolean", "true or false")),
        },
    }
}

/// A text cell by its length, format, listed values and pattern.
fn text(column: &DatasetColumn, pattern: Option<&regex::Regex>, cell: &str) -> Result<Value, Problem> {
    let name = column.name.as_str();
    let cell = if column.format == Some(TextFormat::Email) { cell.trim() } else { cell };
    let chars = cell.chars().count();
    if chars > column.max_chars as usize {
        return Err(Problem::new(name, "too_long", format!("{chars} characters; at most {}", column.max_chars)));
    }
    match column.format {
        Some(TextFormat::Email) if !could_be_email(&migrations::email_key(cell)) => return Err(Problem::new(name, "invalid_email", "not an email address")),
        Some(TextFormat::Country) if !is_country(cell) => return Err(Problem::new(name, "invalid_country", "not an ISO 3166-1 alpha-2 code such as SA")),
        Some(TextFormat::Currency) if !(cell.len() == 3 && cell.bytes().all(|b| b.is_ascii_uppercase())) => {
            return Err(Problem::new(name, "invalid_currency", "an ISO 4217 code such as SAR"));
        }
        _ => {}
    }
    if let Some(values) = &column.values {
        if !values.iter().any(|v| v == cell) {
            return Err(Problem::new(name, format!("invalid_{name}"), format!("one of {}", values.join(", "))));
        }
    }
    if let Some(re) = pattern {
        if !re.is_match(cell) {
            return Err(Problem::new(name, format!("invalid_{name}"), format!("does not match the pattern {}", column.pattern.as_deref().unwrap_or(""))));
        }
    }
    Ok(Value::Text(cell.to_owned()))
}

/// An optional minus, digits, and a fraction of at most `scale` digits after a point: the
/// decimal with exactly `scale` places, or the code of what is wrong.
fn decimal(cell: &str, scale: u32) -> Result<String, &'static str> {
    let digits = cell.strip_prefix('-').unwrap_or(cell);
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || (digits.contains('.') && fraction.is_empty()) {
        return Err("invalid_decimal");
    }
    if fraction.len() > scale as usize {
        return Err("too_many_decimals");
    }
    crate::csv_cells::decimal(cell, scale).ok_or("invalid_decimal")
}

/// `-12.5` with 2 places → `-1250`: an optional minus, digits, and at most `places` decimal
/// places; the code of what is wrong otherwise.
pub fn minor_units(cell: &str, places: u32) -> Result<i64, &'static str> {
    let (negative, digits) = match cell.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cell),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || (digits.contains('.') && fraction.is_empty()) {
        return Err("invalid_amount");
    }
    if fraction.len() > places as usize {
        return Err("too_many_decimals");
    }
    let scale = 10i64.checked_pow(places).ok_or("invalid_amount")?;
    let padded = format!("{fraction:0<width$}", width = places as usize);
    let part = if padded.is_empty() { 0 } else { padded.parse::<i64>().map_err(|_| "invalid_amount")? };
    let minor = whole.parse::<i64>().ok().and_then(|w| w.checked_mul(scale)).and_then(|w| w.checked_add(part)).ok_or("invalid_amount")?;
    Ok(if negative { -minor } else { minor })
}

/// A record's cells read by the header: each settable column the file has (by its index in the
/// dataset), with its value, and the problems of the cells that could not be read, in the
/// file's column order.
pub fn read_record(dataset: &Dataset, checks: &Checks, header: &Header, cells: &[String]) -> (Vec<(usize, Value)>, Vec<Problem>) {
    let mut values: Vec<(usize, Value)> = Vec::with_capacity(cells.len());
    if cells.len() != header.slots.len() {
        return (values, vec![Problem::new("", "wrong_field_count", format!("{} cells; the header has {}", cells.len(), header.slots.len()))]);
    }
    let mut problems: Vec<(usize, Problem)> = Vec::new();
    for &position in &header.order {
        let Some(index) = header.slots[position] else { continue };
        let places = match &dataset.columns[index].ty {
            ColumnType::Money { currency: Some(currency) } => {
                let code = header.slots.iter().position(|s| s.is_some_and(|c| dataset.columns[c].name == *currency)).map(|p| as_stored(header, &cells[p]).trim());
                currency_places(code.filter(|c| !c.is_empty()))
            }
            _ => 2,
        };
        match read_value(dataset, checks, index, as_stored(header, &cells[position]), places) {
            Ok(v) => values.push((index, v)),
            Err(p) => problems.push((position, p)),
        }
    }
    problems.sort_by_key(|(position, _)| *position);
    (values, problems.into_iter().map(|(_, p)| p).collect())
}

/// A cell's text as stored: a CSV's with the export's defusing undone.
fn as_stored<'a>(header: &Header, cell: &'a str) -> &'a str {
    if header.defused {
        undefuse(cell)
    } else {
        cell
    }
}

/// How a workbook's header cells name a dataset's columns (SPEC §14): by a column's name or by
/// its English or Arabic title, perhaps followed by ` (zone)`, the zone its date-time cells are
/// read in. A dataset's columns take the titles of the report columns of the same name (those an
/// import ignores too), so a workbook exported in either language names them all.
#[derive(Debug, Clone, Default)]
pub struct Headings {
    /// A title, lower-cased, and the name it gives.
    titles: std::collections::HashMap<String, String>,
}

impl Headings {
    /// The titles that name `dataset`'s columns in `catalog`.
    pub fn of(catalog: &Catalog, dataset: &Dataset) -> Headings {
        let mut titles = std::collections::HashMap::new();
        let known = |name: &str| dataset.column(name).is_some() || dataset.ignore.iter().any(|i| i == name);
        for column in catalog.reports.iter().flat_map(|r| &r.columns).filter(|c| known(&c.name)) {
            for title in [&column.title.en, &column.title.ar].into_iter().flatten() {
                titles.entry(title.trim().to_lowercase()).or_insert_with(|| column.name.clone());
            }
        }
        Headings { titles }
    }

    /// The name a header cell gives (the cell itself when it names nothing, for the header's
    /// own error), and the zone of its ` (zone)` suffix, if it has one.
    pub fn read(&self, dataset: &Dataset, cell: &str) -> (String, Option<jiff::tz::TimeZone>) {
        let cell = cell.trim();
        let name_of = |text: &str| {
            let text = text.trim();
            let known = dataset.column(text).is_some() || dataset.ignore.iter().any(|i| i == text);
            if known { Some(text.to_owned()) } else { self.titles.get(&text.to_lowercase()).cloned() }
        };
        if let Some(name) = name_of(cell) {
            return (name, None);
        }
        let zoned = cell.strip_suffix(')').and_then(|rest| rest.rsplit_once(" ("));
        if let Some((head, zone)) = zoned {
            if let (Some(name), Ok(zone)) = (name_of(head), jiff::tz::TimeZone::get(zone)) {
                return (name, Some(zone));
            }
        }
        (cell.to_owned(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn demo(name: &str) -> Dataset {
        Catalog::builtin().dataset(name).cloned().expect("a demo dataset")
    }

    /// The code of the problem reading `cell` as `column` of the demo's `dataset`, if any.
    fn code(dataset: &str, column: &str, cell: &str) -> Option<String> {
        let d = demo(dataset);
        let index = d.columns.iter().position(|c| c.name == column).expect("a column");
        read_cell(&d, &Checks::of(&d), index, cell, 2).err().map(|p| p.code.into_owned())
    }

    fn value(dataset: &str, column: &str, cell: &str) -> Value {
        let d = demo(dataset);
        let index = d.columns.iter().position(|c| c.name == column).expect("a column");
        read_cell(&d, &Checks::of(&d), index, cell, 2).expect("a valid cell")
    }

    #[test]
    fn a_header_needs_its_key_and_knows_every_column_ignoring_what_only_an_export_writes() {
        let customers = demo("customers");
        let h = Header::read(&customers, &["\u{feff}customer_id", "email", "name", "lifetime_total"]).unwrap();
        assert_eq!(h.slots, vec![None, Some(0), Some(1), None]);
        assert_eq!(Header::read(&customers, &["name"]).unwrap_err().code, "missing_key_column");
        let orders = demo("orders");
        assert_eq!(Header::read(&orders, &["order_ref", "colour"]).unwrap_err().code, "unknown_column");
        assert_eq!(Header::read(&orders, &["order_ref", "notes", "notes"]).unwrap_err().code, "duplicate_column");
    }

    #[test]
    fn money_takes_at_most_its_currencys_places_and_says_which_rule_a_cell_broke() {
        assert_eq!(minor_units("-12.50", 2), Ok(-1250));
        assert_eq!(minor_units("12.5", 2), Ok(1250));
        assert_eq!(minor_units("7", 0), Ok(7));
        assert_eq!(minor_units("0.125", 3), Ok(125));
        for bad in ["", "-", "1.", ".5", "1,00", "1e3", "--1", "9223372036854775807"] {
            assert_eq!(minor_units(bad, 2), Err("invalid_amount"), "{bad:?}");
        }
        assert_eq!(minor_units("12.345", 2), Err("too_many_decimals"));
        assert_eq!(minor_units("5.5", 0), Err("too_many_decimals"));
        assert_eq!(code("orders", "total", "12.345").as_deref(), Some("too_many_decimals"));
        assert_eq!(code("orders", "total", "twelve").as_deref(), Some("invalid_amount"));
    }

    #[test]
    fn each_kind_of_cell_refuses_what_it_cannot_store_with_its_own_code() {
        assert_eq!(code("customers", "email", "  ").as_deref(), Some("missing_value"));
        assert_eq!(code("customers", "email", "not-an-email").as_deref(), Some("invalid_email"));
        assert_eq!(code("customers", "country", "Saudi").as_deref(), Some("invalid_country"));
        assert_eq!(code("customers", "country", "").as_deref(), Some("missing_value"));
        assert_eq!(code("customers", "name", "a\u{7}b").as_deref(), Some("control_character"));
        assert_eq!(code("customers", "name", &"x".repeat(1001)).as_deref(), Some("too_long"));
        assert_eq!(code("orders", "notes", &"x".repeat(10_000)), None);
        assert_eq!(code("orders", "placed_at", "2026-01-31 09:30").as_deref(), Some("invalid_instant"));
        assert_eq!(code("orders", "status", "shipped").as_deref(), Some("invalid_status"), "a value not listed is invalid_<column>");
        assert_eq!(code("orders", "order_ref", "has space").as_deref(), Some("invalid_order_ref"), "so is a cell the pattern does not match");
        assert_eq!(code("orders", "currency", "sar").as_deref(), Some("invalid_currency"));
        assert_eq!(code("orders", "order_ref", "").as_deref(), Some("missing_value"));
        assert_eq!(code("orders", "order_ref", &"r".repeat(65)).as_deref(), Some("too_long"));
        assert_eq!(value("orders", "placed_at", "2026-01-31T09:30:00+03:00"), Value::Instant(1_769_841_000_000, false));
        assert_eq!(value("customers", "name", "'=HYPERLINK(x)"), Value::Text("=HYPERLINK(x)".into()), "an export's defusing is undone");
        assert_eq!(value("customers", "name", "محمد العتيبي"), Value::Text("محمد العتيبي".into()));
        assert_eq!(value("customers", "email", " Ali@Acme.test "), Value::Text("Ali@Acme.test".into()));
        assert_eq!(value("customers", "phone", ""), Value::Text(String::new()), "an empty text cell is empty text");
    }

    #[test]
    fn the_other_types_read_what_an_export_writes_and_nothing_else() {
        let catalog = crate::catalog::parse(
            "t.toml",
            r#"
[[dataset]]
name = "t"
table = "t"
tenant = "org"
key = [{ name = "n", column = "n" }, { name = "day", column = "day" }]
columns = [
  { name = "n", column = "n", type = "integer" },
  { name = "day", column = "day", type = "date" },
  { name = "rate", column = "rate", type = "decimal", scale = 2 },
  { name = "ok", column = "ok", type = "boolean" },
  { name = "fee", column = "fee", type = "money", currency = "cur" },
  { name = "cur", column = "cur", type = "text" },
]
"#,
        )
        .expect("a catalog");
        let d = &catalog.datasets[0];
        let checks = Checks::of(d);
        let read = |i: usize, cell: &str| read_cell(d, &checks, i, cell, 2).map_err(|p| p.code.into_owned());
        assert_eq!(read(0, "-12"), Ok(Value::Integer(-12)));
        assert_eq!(read(0, "+12"), Err("invalid_integer".into()));
        assert_eq!(read(0, ""), Err("missing_value".into()), "a key part is never empty");
        assert_eq!(read(1, "2026-02-28"), Ok(Value::Date("2026-02-28".into())));
        assert_eq!(read(1, "2026-02-30"), Err("invalid_date".into()));
        assert_eq!(read(2, "0.5"), Ok(Value::Decimal("0.50".into())));
        assert_eq!(read(2, "0.505"), Err("too_many_decimals".into()));
        assert_eq!(read(2, ""), Ok(Value::Null), "an empty cell that is not text is NULL");
        assert_eq!(read(3, "TRUE"), Ok(Value::Boolean(true)));
        assert_eq!(read(3, "0"), Ok(Value::Boolean(false)));
        assert_eq!(read(3, "yes"), Err("invalid_boolean".into()));
        // A money cell is read by its row's currency.
        let header = Header::read(d, &["n", "day", "fee", "cur"]).unwrap();
        let cells = |fee: &str, cur: &str| ["1", "2026-01-01", fee, cur].map(String::from).to_vec();
        let (values, problems) = read_record(d, &checks, &header, &cells("1.234", "KWD"));
        assert!(problems.is_empty() && values.contains(&(4, Value::Money(1234))), "{values:?} {problems:?}");
        let (_, problems) = read_record(d, &checks, &header, &cells("1.5", "JPY"));
        assert_eq!(problems.iter().map(|p| p.code.as_ref()).collect::<Vec<_>>(), ["too_many_decimals"]);
        let (_, problems) = read_record(d, &checks, &header, &["1".to_owned()]);
        assert_eq!(problems[0].code, "wrong_field_count");
    }
}
