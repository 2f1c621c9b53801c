//! Validation of a new request (SPEC §3.1), run only when its key is not yet bound.

use crate::auth::Role;
use crate::catalog::{Catalog, Filter, FilterTest, FilterValue, Report};
use crate::iso_codes::is_country;
use crate::error::{AppError, FieldError};
use app::{Compression, ExportRequest, FileFormat, TimeRange};
use serde_json::Value;

/// Finds every text value (and member name) with a control character, U+0000–U+001F or U+007F.
pub fn control_characters(value: &Value, pointer: &str, out: &mut Vec<FieldError>) {
    let bad = |s: &str| s.chars().any(|c| (c as u32) < 0x20 || c as u32 == 0x7f);
    match value {
        Value::String(s) if bad(s) => out.push(FieldError::new(pointer, "contains a control character")),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                control_characters(item, &format!("{pointer}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let child = format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1"));
                if bad(k) {
                    out.push(FieldError::new(&child, "the name contains a control character"));
                }
                control_characters(v, &child, out);
            }
        }
        _ => {}
    }
}

/// A valid request's report.
pub struct Validated<'c> {
    /// The report asked for.
    pub report: &'c Report,
}

/// Checks a request against the catalog and the role. Field problems → 422 `invalid-request`
/// listing every one; a report whose `roles` leave the role out, or PII columns asked for by a
/// role that may not read them → 403.
pub fn validate<'c>(catalog: &'c Catalog, req: &ExportRequest, role: Role) -> Result<Validated<'c>, AppError> {
    let mut errors = Vec::new();
    let report = catalog.report(&req.report);
    if report.is_none() {
        errors.push(FieldError::new("/report", format!("unknown report {:?}", req.report)));
    }
    if req.format == FileFormat::Xlsx {
        // A workbook is a ZIP of its own, with no byte order mark (SPEC §14).
        if req.options.bom {
            errors.push(FieldError::new("/options/bom", "a byte order mark does not apply to xlsx"));
        }
        if req.options.compression != Compression::None {
            errors.push(FieldError::new("/options/compression", "gzip does not apply to xlsx, which is compressed already"));
        }
    }
    if jiff::tz::TimeZone::get(&req.timezone).is_err() {
        errors.push(FieldError::new("/timezone", "not an IANA timezone"));
    }
    if let TimeRange::Dates { from, to } = &req.time_range {
        let f = parse_date(from, "/time_range/from", &mut errors);
        let t = parse_date(to, "/time_range/to", &mut errors);
        if let (Some(f), Some(t)) = (f, t) {
            if f > t {
                errors.push(FieldError::new("/time_range/from", "from is after to"));
            }
        }
    }
    if let Some(report) = report {
        check_filters(report, req, &mut errors);
        if let Some(cols) = &req.columns {
            if cols.is_empty() {
                errors.push(FieldError::new("/columns", "list at least one column, or null for all"));
            }
            for (i, name) in cols.iter().enumerate() {
                if report.column(name).is_none() {
                    errors.push(FieldError::new(format!("/columns/{i}"), format!("unknown column {name:?}")));
                } else if cols[..i].contains(name) {
                    errors.push(FieldError::new(format!("/columns/{i}"), "listed twice"));
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(AppError::InvalidRequest(errors));
    }
    let report = report.ok_or_else(|| AppError::Internal("report vanished after validation".into()))?;
    if !report.roles.allows(role) {
        return Err(AppError::ExportNotPermitted(format!("your role may not export {}", report.name)));
    }
    if let Some(cols) = &req.columns {
        if !role.may_read_pii() && cols.iter().any(|c| report.column(c).is_some_and(|c| c.pii)) {
            return Err(AppError::ExportNotPermitted("your role may not export personal data columns".into()));
        }
    }
    Ok(Validated { report })
}

fn parse_date(s: &str, pointer: &str, errors: &mut Vec<FieldError>) -> Option<jiff::civil::Date> {
    let ok_shape = s.len() == 10 && s.as_bytes()[4] == b'-' && s.as_bytes()[7] == b'-';
    match s.parse::<jiff::civil::Date>() {
        Ok(d) if ok_shape => Some(d),
        _ => {
            errors.push(FieldError::new(pointer, "expected a date YYYY-MM-DD"));
            None
        }
    }
}

fn check_filters(report: &Report, req: &ExportRequest, errors: &mut Vec<FieldError>) {
    for (name, value) in &req.filters {
        let pointer = format!("/filters/{}", name.replace('~', "~0").replace('/', "~1"));
        let Some(filter) = report.filter(name) else {
            errors.push(FieldError::new(pointer, format!("unknown filter for {}", report.name)));
            continue;
        };
        match &filter.test {
            FilterTest::OneOf { values } => check_set(value, &pointer, errors, |s| values.iter().any(|v| v == s)),
            FilterTest::Countries => check_set(value, &pointer, errors, is_country),
            FilterTest::Equals { of } | FilterTest::AtLeast { of } | FilterTest::AtMost { of } => {
                if let Err(expected) = check_value(of, value) {
                    errors.push(FieldError::new(pointer, expected));
                }
            }
        }
    }
    // A lower and an upper bound on the same column must not exclude everything.
    let bound = |f: &Filter| req.filters.get(&f.name).and_then(Value::as_f64);
    for low in report.filters.iter().filter(|f| matches!(f.test, FilterTest::AtLeast { .. })) {
        for high in report.filters.iter().filter(|f| matches!(f.test, FilterTest::AtMost { .. }) && f.sql == low.sql) {
            if let (Some(min), Some(max)) = (bound(low), bound(high)) {
                if min > max {
                    errors.push(FieldError::new(format!("/filters/{}", low.name), format!("{} is above {}", low.name, high.name)));
                }
            }
        }
    }
}

/// Whether `value` is one value of the type `of`; else what was expected.
fn check_value(of: &FilterValue, value: &Value) -> Result<(), &'static str> {
    let fits = match of {
        FilterValue::Text => value.is_string(),
        FilterValue::Integer => value.as_i64().is_some(),
        FilterValue::Decimal | FilterValue::Money { .. } => value.as_f64().is_some_and(f64::is_finite),
        FilterValue::Date => value.as_str().is_some_and(|s| s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok()),
        FilterValue::Boolean => value.is_boolean(),
    };
    if fits {
        return Ok(());
    }
    Err(match of {
        FilterValue::Text => "expected a string",
        FilterValue::Integer => "expected a whole number",
        FilterValue::Decimal | FilterValue::Money { .. } => "expected a number",
        FilterValue::Date => "expected a date YYYY-MM-DD",
        FilterValue::Boolean => "expected true or false",
    })
}

fn check_set(value: &Value, pointer: &str, errors: &mut Vec<FieldError>, ok: impl Fn(&str) -> bool) {
    let Some(items) = value.as_array().filter(|a| !a.is_empty()) else {
        errors.push(FieldError::new(pointer, "expected a non-empty list"));
        return;
    };
    for (i, item) in items.iter().enumerate() {
        if !item.as_str().is_some_and(&ok) {
            errors.push(FieldError::new(format!("{pointer}/{i}"), "not an allowed value"));
        }
    }
}
