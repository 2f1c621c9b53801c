//! The file an export delivers (SPEC §3.1, §14): its name's extension and its media type, chosen
//! by the request's `format` and `options.compression`, and recognised again by a stored key's
//! extension.

use app::{Compression, ExportRequest, FileFormat};

/// A kind of delivered file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// CSV.
    Csv,
    /// gzip of a CSV.
    CsvGzip,
    /// An XLSX workbook.
    Xlsx,
}

impl FileType {
    /// Every kind, the longest extension first (so `.csv.gz` is not read as `.gz`).
    pub const ALL: [FileType; 3] = [FileType::CsvGzip, FileType::Xlsx, FileType::Csv];

    /// The file `request` asks for.
    pub fn of(request: &ExportRequest) -> FileType {
        match (request.format, request.options.compression) {
            (FileFormat::Xlsx, _) => FileType::Xlsx,
            (FileFormat::Csv, Compression::Gzip) => FileType::CsvGzip,
            (FileFormat::Csv, Compression::None) => FileType::Csv,
        }
    }

    /// The kind a stored file's name ends with, if any.
    pub fn of_name(name: &str) -> Option<FileType> {
        FileType::ALL.into_iter().find(|t| name.ends_with(&format!(".{}", t.extension())))
    }

    /// Its name's extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            FileType::Csv => "csv",
            FileType::CsvGzip => "csv.gz",
            FileType::Xlsx => "xlsx",
        }
    }

    /// Its media type, as served.
    pub fn media_type(self) -> &'static str {
        match self {
            FileType::Csv => "text/csv; charset=utf-8",
            FileType::CsvGzip => "application/gzip",
            FileType::Xlsx => XLSX_MEDIA_TYPE,
        }
    }
}

/// The media type of an XLSX workbook.
pub const XLSX_MEDIA_TYPE: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_name_is_recognised_by_its_whole_extension() {
        assert_eq!(FileType::of_name("exports/t/e/ab.csv.gz"), Some(FileType::CsvGzip));
        assert_eq!(FileType::of_name("exports/t/e/ab.csv"), Some(FileType::Csv));
        assert_eq!(FileType::of_name("exports/t/e/parts/00001.1-ab.xlsx"), Some(FileType::Xlsx));
        assert_eq!(FileType::of_name("exports/t/e/manifest-ab.json"), None);
        for t in FileType::ALL {
            assert_eq!(FileType::of_name(&format!("x.{}", t.extension())), Some(t));
        }
    }
}
