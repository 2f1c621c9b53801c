//! The parts of an XLSX workbook around its rows (ECMA-376 SpreadsheetML in an Open Packaging
//! Conventions ZIP): the content types, the relationships, the document's properties, the
//! workbook with its sheets and their autofilters, the styles, and each sheet's head and tail
//! around the rows [`crate::xlsx_cells`] wrote. Every part is written in the order Excel writes
//! it, with fixed times and one compression level, so the same rows give the same bytes.

use std::io::{Read, Seek, Write};

/// The level sheets are deflated at: the fastest, a trade of some size for time (a sheet's XML
/// is repetitive, and deflates well even so).
const DEFLATE_LEVEL: i64 = 1;

const MAIN_NS: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
const REL_NS: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const XML_HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n";

/// What a workbook's columns hold, for their number formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Text, booleans, whole numbers: no number format.
    Plain,
    /// A decimal of this many places.
    Decimal(u32),
    /// Money: two places unless the row's currency has other.
    Money,
    /// A day.
    Date,
    /// A date-time in the export's timezone.
    DateTime,
}

/// The most places money is written with a format of its own (more use two).
pub const MONEY_PLACES: u32 = 4;

/// The cell formats of a workbook (its `cellXfs`), found by what a cell holds. Index 0 is the
/// default, with no number format.
#[derive(Debug, Clone)]
pub struct Styles {
    /// The number format of each cell format after the default: a built-in id or a code.
    formats: Vec<NumberFormat>,
    /// The cell formats of decimals, by their places.
    decimals: Vec<(u32, u32)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum NumberFormat {
    /// The header: bold, no number format.
    Bold,
    /// One of the formats every spreadsheet knows by its id.
    BuiltIn(u32),
    /// A format of the workbook's own.
    Code(String),
}

/// The first id a workbook's own number formats may take.
const FIRST_CUSTOM_FORMAT: u32 = 164;

impl Styles {
    /// The header's cell format.
    pub const HEADER: u32 = 1;
    /// A day's.
    pub const DATE: u32 = 2;
    /// A date-time's.
    pub const DATE_TIME: u32 = 3;
    /// Money's, of 0 places; `MONEY + n` of n places, up to [`MONEY_PLACES`].
    pub const MONEY: u32 = 4;

    /// The formats of a workbook whose columns are of `kinds`.
    pub fn new(kinds: &[Kind]) -> Styles {
        let money = |places: u32| match places {
            0 => NumberFormat::BuiltIn(3),
            2 => NumberFormat::BuiltIn(4),
            n => NumberFormat::Code(format!("#,##0.{}", "0".repeat(n as usize))),
        };
        let mut formats = vec![NumberFormat::Bold, NumberFormat::Code("yyyy-mm-dd".into()), NumberFormat::Code("yyyy-mm-dd hh:mm:ss".into())];
        formats.extend((0..=MONEY_PLACES).map(money));
        let mut decimals = Vec::new();
        for kind in kinds {
            if let Kind::Decimal(scale) = kind {
                if decimals.iter().all(|(s, _)| s != scale) {
                    let format = match scale {
                        0 => NumberFormat::BuiltIn(1),
                        2 => NumberFormat::BuiltIn(2),
                        n => NumberFormat::Code(format!("0.{}", "0".repeat(*n as usize))),
                    };
                    formats.push(format);
                    decimals.push((*scale, formats.len() as u32));
                }
            }
        }
        Styles { formats, decimals }
    }

    /// The cell format of a decimal of `scale` places (none for a scale no column has).
    pub fn decimal(&self, scale: u32) -> u32 {
        self.decimals.iter().find(|(s, _)| *s == scale).map_or(0, |(_, xf)| *xf)
    }

    /// The cell format of money of `places` places.
    pub fn money(places: u32) -> u32 {
        Styles::MONEY + if places <= MONEY_PLACES { places } else { 2 }
    }

    /// The cell format of a column of `kind`, which its empty cells take too.
    pub fn column(&self, kind: Kind) -> u32 {
        match kind {
            Kind::Plain => 0,
            Kind::Decimal(scale) => self.decimal(scale),
            Kind::Money => Styles::money(2),
            Kind::Date => Styles::DATE,
            Kind::DateTime => Styles::DATE_TIME,
        }
    }

    /// `xl/styles.xml`.
    fn xml(&self) -> String {
        let mut codes = String::new();
        let mut ids = Vec::with_capacity(self.formats.len());
        let mut next = FIRST_CUSTOM_FORMAT;
        let mut custom = 0;
        for format in &self.formats {
            ids.push(match format {
                NumberFormat::Bold => 0,
                NumberFormat::BuiltIn(id) => *id,
                NumberFormat::Code(code) => {
                    codes.push_str(&format!("<numFmt numFmtId=\"{next}\" formatCode=\"{}\"/>", attribute(code)));
                    custom += 1;
                    next += 1;
                    next - 1
                }
            });
        }
        let mut xfs = String::from("<xf numFmtId=\"0\" fontId=\"0\" fillId=\"0\" borderId=\"0\" xfId=\"0\"/>");
        for (format, id) in self.formats.iter().zip(ids) {
            xfs.push_str(&match format {
                NumberFormat::Bold => "<xf numFmtId=\"0\" fontId=\"1\" fillId=\"0\" borderId=\"0\" xfId=\"0\" applyFont=\"1\"/>".to_owned(),
                _ => format!("<xf numFmtId=\"{id}\" fontId=\"0\" fillId=\"0\" borderId=\"0\" xfId=\"0\" applyNumberFormat=\"1\"/>"),
            });
        }
        let font = |bold: &str| format!("<font>{bold}<sz val=\"11\"/><color rgb=\"FF000000\"/><name val=\"Calibri\"/><family val=\"2\"/><scheme val=\"minor\"/></font>");
        format!(
            "{XML_HEAD}<styleSheet xmlns=\"{MAIN_NS}\"><numFmts count=\"{custom}\">{codes}</numFmts><fonts count=\"2\">{}{}</fonts>\
             <fills count=\"2\"><fill><patternFill patternType=\"none\"/></fill><fill><patternFill patternType=\"gray125\"/></fill></fills>\
             <borders count=\"1\"><border><left/><right/><top/><bottom/><diagonal/></border></borders>\
             <cellStyleXfs count=\"1\"><xf numFmtId=\"0\" fontId=\"0\" fillId=\"0\" borderId=\"0\"/></cellStyleXfs>\
             <cellXfs count=\"{}\">{xfs}</cellXfs><cellStyles count=\"1\"><cellStyle name=\"Normal\" xfId=\"0\" builtinId=\"0\"/></cellStyles>\
             <dxfs count=\"0\"/><tableStyles count=\"0\" defaultTableStyle=\"TableStyleMedium9\" defaultPivotStyle=\"PivotStyleLight16\"/></styleSheet>",
            font(""),
            font("<b/>"),
            self.formats.len() + 1,
        )
    }
}

/// Text for an XML attribute's value.
pub fn attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 => out.push_str(&format!("&#{};", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A column's letters: 0 is `A`, 25 `Z`, 26 `AA`.
pub fn column_letters(mut col: usize) -> String {
    let mut letters = Vec::new();
    loop {
        letters.push(b'A' + (col % 26) as u8);
        if col < 26 {
            break;
        }
        col = col / 26 - 1;
    }
    letters.reverse();
    String::from_utf8(letters).unwrap_or_default()
}

/// A sheet whose rows are written: its name, its rows (the header's among them) and the file
/// holding the XML of every row after the header.
pub struct FinishedSheet {
    /// The sheet's name.
    pub name: String,
    /// Its rows, the header's included.
    pub rows: u32,
    /// The data rows' XML (`<row>` elements), from its start.
    pub data: std::fs::File,
}

/// What the whole workbook needs to be written besides its sheets' rows.
pub struct Package<'a> {
    /// The header row's cells.
    pub titles: &'a [String],
    /// Each column's cell format, which its empty cells take.
    pub column_styles: &'a [u32],
    /// Each column's width, in characters.
    pub widths: &'a [f64],
    /// Right-to-left sheets.
    pub right_to_left: bool,
    /// The workbook's creation time.
    pub created: jiff::Timestamp,
    /// The cell formats.
    pub styles: &'a Styles,
}

impl Package<'_> {
    /// Writes the workbook with `sheets` into `out`, a ZIP streamed as it is made.
    pub fn write(&self, sheets: Vec<FinishedSheet>, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        use zip::write::SimpleFileOptions;
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(DEFLATE_LEVEL))
            .last_modified_time(zip::DateTime::default());
        let mut zip = zip::ZipWriter::new_stream(out);
        let names: Vec<&str> = sheets.iter().map(|s| s.name.as_str()).collect();
        let created = self.created.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let parts: [(&str, String); 6] = [
            ("[Content_Types].xml", content_types(sheets.len())),
            ("_rels/.rels", root_relationships()),
            ("docProps/app.xml", app_properties(&names)),
            ("docProps/core.xml", core_properties(&created)),
            ("xl/workbook.xml", self.workbook(&sheets)),
            ("xl/_rels/workbook.xml.rels", workbook_relationships(sheets.len())),
        ];
        for (name, xml) in parts {
            zip.start_file(name, options).map_err(zip_error)?;
            zip.write_all(xml.as_bytes())?;
        }
        for (index, mut sheet) in sheets.into_iter().enumerate() {
            let head = self.sheet_head(index, sheet.rows);
            let tail = self.sheet_tail(sheet.rows);
            let data_len = sheet.data.seek(std::io::SeekFrom::End(0))?;
            sheet.data.rewind()?;
            // ZIP64 only for a sheet that needs it, which an old reader may not open.
            let large = data_len + (head.len() + tail.len()) as u64 > u64::from(u32::MAX);
            zip.start_file(format!("xl/worksheets/sheet{}.xml", index + 1), options.large_file(large)).map_err(zip_error)?;
            zip.write_all(head.as_bytes())?;
            std::io::copy(&mut std::io::BufReader::with_capacity(256 * 1024, (&mut sheet.data).take(data_len)), &mut zip)?;
            zip.write_all(tail.as_bytes())?;
        }
        zip.start_file("xl/styles.xml", options).map_err(zip_error)?;
        zip.write_all(self.styles.xml().as_bytes())?;
        zip.finish().map_err(zip_error)?;
        Ok(())
    }

    /// The cells' range of a sheet of `rows` rows, `A1:G4`.
    fn range(&self, rows: u32, absolute: bool) -> String {
        let last = column_letters(self.titles.len().saturating_sub(1));
        let dollar = if absolute { "$" } else { "" };
        format!("{dollar}A{dollar}1:{dollar}{last}{dollar}{rows}")
    }

    fn workbook(&self, sheets: &[FinishedSheet]) -> String {
        let mut list = String::new();
        let mut filters = String::new();
        for (i, sheet) in sheets.iter().enumerate() {
            list.push_str(&format!("<sheet name=\"{}\" sheetId=\"{}\" r:id=\"rId{}\"/>", attribute(&sheet.name), i + 1, i + 1));
            if !self.titles.is_empty() {
                let quoted = format!("'{}'", sheet.name.replace('\'', "''"));
                filters.push_str(&format!(
                    "<definedName name=\"_xlnm._FilterDatabase\" localSheetId=\"{i}\" hidden=\"1\">{}!{}</definedName>",
                    attribute(&quoted),
                    self.range(sheet.rows, true)
                ));
            }
        }
        let names = if filters.is_empty() { String::new() } else { format!("<definedNames>{filters}</definedNames>") };
        format!(
            "{XML_HEAD}<workbook xmlns=\"{MAIN_NS}\" xmlns:r=\"{REL_NS}\"><fileVersion appName=\"xl\" lastEdited=\"4\" lowestEdited=\"4\" rupBuild=\"4505\"/>\
             <workbookPr defaultThemeVersion=\"124226\"/><bookViews><workbookView xWindow=\"240\" yWindow=\"15\" windowWidth=\"16095\" windowHeight=\"9660\"/></bookViews>\
             <sheets>{list}</sheets>{names}<calcPr calcId=\"124519\" fullCalcOnLoad=\"1\"/></workbook>"
        )
    }

    /// A sheet's XML before its data rows: its range, its view (frozen header, direction), its
    /// columns' widths and formats, and the header row.
    fn sheet_head(&self, index: usize, rows: u32) -> String {
        let dimension = if self.titles.is_empty() { "A1".to_owned() } else { self.range(rows, false) };
        let rtl = if self.right_to_left { " rightToLeft=\"1\"" } else { "" };
        let selected = if index == 0 { " tabSelected=\"1\"" } else { "" };
        let mut cols = String::new();
        for (i, width) in self.widths.iter().enumerate() {
            let style = match self.column_styles.get(i) {
                Some(0) | None => String::new(),
                Some(xf) => format!(" style=\"{xf}\""),
            };
            cols.push_str(&format!("<col min=\"{n}\" max=\"{n}\" width=\"{width}\"{style} customWidth=\"1\"/>", n = i + 1));
        }
        let cols = if cols.is_empty() { cols } else { format!("<cols>{cols}</cols>") };
        let mut header = String::from("<row r=\"1\">");
        for (i, title) in self.titles.iter().enumerate() {
            let mut text = Vec::new();
            crate::xlsx_cells::inline_string(&mut text, title);
            header.push_str(&format!("<c r=\"{}1\" s=\"{}\" t=\"inlineStr\">{}</c>", column_letters(i), Styles::HEADER, String::from_utf8_lossy(&text)));
        }
        header.push_str("</row>");
        format!(
            "{XML_HEAD}<worksheet xmlns=\"{MAIN_NS}\" xmlns:r=\"{REL_NS}\"><dimension ref=\"{dimension}\"/>\
             <sheetViews><sheetView{rtl}{selected} workbookViewId=\"0\"><pane ySplit=\"1\" topLeftCell=\"A2\" activePane=\"bottomLeft\" state=\"frozen\"/>\
             <selection pane=\"bottomLeft\" activeCell=\"A2\" sqref=\"A2\"/></sheetView></sheetViews><sheetFormatPr defaultRowHeight=\"15\"/>{cols}<sheetData>{header}"
        )
    }

    /// A sheet's XML after its data rows: the autofilter over its rows.
    fn sheet_tail(&self, rows: u32) -> String {
        let filter = if self.titles.is_empty() { String::new() } else { format!("<autoFilter ref=\"{}\"/>", self.range(rows, false)) };
        format!("</sheetData>{filter}<pageMargins left=\"0.7\" right=\"0.7\" top=\"0.75\" bottom=\"0.75\" header=\"0.3\" footer=\"0.3\"/></worksheet>")
    }
}

fn zip_error(e: zip::result::ZipError) -> std::io::Error {
    match e {
        zip::result::ZipError::Io(e) => e,
        other => std::io::Error::other(other.to_string()),
    }
}

fn content_types(sheets: usize) -> String {
    let mut overrides = String::new();
    for i in 1..=sheets {
        overrides.push_str(&format!(
            "<Override PartName=\"/xl/worksheets/sheet{i}.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml\"/>"
        ));
    }
    format!(
        "{XML_HEAD}<Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\">\
         <Default Extension=\"rels\" ContentType=\"application/vnd.openxmlformats-package.relationships+xml\"/><Default Extension=\"xml\" ContentType=\"application/xml\"/>\
         <Override PartName=\"/docProps/app.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.extended-properties+xml\"/>\
         <Override PartName=\"/docProps/core.xml\" ContentType=\"application/vnd.openxmlformats-package.core-properties+xml\"/>\
         <Override PartName=\"/xl/styles.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml\"/>\
         <Override PartName=\"/xl/workbook.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml\"/>{overrides}</Types>"
    )
}

fn root_relationships() -> String {
    format!(
        "{XML_HEAD}<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\">\
         <Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument\" Target=\"xl/workbook.xml\"/>\
         <Relationship Id=\"rId2\" Type=\"http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties\" Target=\"docProps/core.xml\"/>\
         <Relationship Id=\"rId3\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/extended-properties\" Target=\"docProps/app.xml\"/></Relationships>"
    )
}

fn workbook_relationships(sheets: usize) -> String {
    let mut list = String::new();
    for i in 1..=sheets {
        list.push_str(&format!("<Relationship Id=\"rId{i}\" Type=\"{REL_NS}/worksheet\" Target=\"worksheets/sheet{i}.xml\"/>"));
    }
    list.push_str(&format!("<Relationship Id=\"rId{}\" Type=\"{REL_NS}/styles\" Target=\"styles.xml\"/>", sheets + 1));
    format!("{XML_HEAD}<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\">{list}</Relationships>")
}

fn app_properties(sheets: &[&str]) -> String {
    let titles: String = sheets.iter().map(|name| format!("<vt:lpstr>{}</vt:lpstr>", attribute(name))).collect();
    format!(
        "{XML_HEAD}<Properties xmlns=\"http://schemas.openxmlformats.org/officeDocument/2006/extended-properties\" xmlns:vt=\"http://schemas.openxmlformats.org/officeDocument/2006/docPropsVTypes\">\
         <Application>exportd</Application><DocSecurity>0</DocSecurity><ScaleCrop>false</ScaleCrop>\
         <HeadingPairs><vt:vector size=\"2\" baseType=\"variant\"><vt:variant><vt:lpstr>Worksheets</vt:lpstr></vt:variant><vt:variant><vt:i4>{n}</vt:i4></vt:variant></vt:vector></HeadingPairs>\
         <TitlesOfParts><vt:vector size=\"{n}\" baseType=\"lpstr\">{titles}</vt:vector></TitlesOfParts>\
         <LinksUpToDate>false</LinksUpToDate><SharedDoc>false</SharedDoc><HyperlinksChanged>false</HyperlinksChanged><AppVersion>12.0000</AppVersion></Properties>",
        n = sheets.len()
    )
}

fn core_properties(created: &str) -> String {
    format!(
        "{XML_HEAD}<cp:coreProperties xmlns:cp=\"http://schemas.openxmlformats.org/package/2006/metadata/core-properties\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\" \
         xmlns:dcterms=\"http://purl.org/dc/terms/\" xmlns:dcmitype=\"http://purl.org/dc/dcmitype/\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">\
         <dc:creator>exportd</dc:creator><dcterms:created xsi:type=\"dcterms:W3CDTF\">{created}</dcterms:created>\
         <dcterms:modified xsi:type=\"dcterms:W3CDTF\">{created}</dcterms:modified></cp:coreProperties>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_lettered_as_spreadsheets_letter_them() {
        assert_eq!(column_letters(0), "A");
        assert_eq!(column_letters(25), "Z");
        assert_eq!(column_letters(26), "AA");
        assert_eq!(column_letters(701), "ZZ");
        assert_eq!(column_letters(702), "AAA");
        assert_eq!(column_letters(16_383), "XFD", "a sheet's last column");
    }

    #[test]
    fn money_and_decimals_take_formats_of_their_places() {
        let styles = Styles::new(&[Kind::Decimal(3), Kind::Money, Kind::Decimal(2), Kind::Decimal(3)]);
        let xml = styles.xml();
        assert!(xml.contains("<numFmt numFmtId=\"166\" formatCode=\"#,##0.0\"/>"), "{xml}");
        assert!(xml.contains("formatCode=\"#,##0.000\""));
        assert!(xml.contains("formatCode=\"0.000\""));
        assert_eq!(styles.column(Kind::Money), Styles::MONEY + 2);
        assert_eq!(styles.decimal(3), 9, "decimals follow the money formats, once each");
        assert_eq!(styles.decimal(2), 10);
        assert_eq!(styles.decimal(5), 0, "a scale no column has: no format");
        assert!(xml.contains(&format!("<cellXfs count=\"{}\">", 11)));
    }
}
