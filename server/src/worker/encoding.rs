//! The bytes of a file: its CSV as written, or the gzip of it (SPEC §3.1 `compression`). gzip is
//! written with no name and no time (mtime 0), so the same CSV always gives the same bytes, and
//! at the fast level, which keeps an export near the speed of its database (CSV still shrinks
//! several times).

use app::Compression;
use flate2::write::GzEncoder;
use std::io::Write;

/// Turns a file's CSV into its bytes, a chunk at a time.
pub enum Encoder {
    /// The CSV as it is.
    Plain,
    /// gzip of it.
    Gzip(GzEncoder<Vec<u8>>),
}

impl Encoder {
    /// An encoder for `compression`.
    pub fn new(compression: Compression) -> Encoder {
        match compression {
            Compression::None => Encoder::Plain,
            Compression::Gzip => Encoder::Gzip(flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::fast())),
        }
    }

    /// The bytes of the next chunk of CSV (with gzip, what the encoder has ready so far).
    pub fn encode(&mut self, csv: Vec<u8>) -> std::io::Result<Vec<u8>> {
        match self {
            Encoder::Plain => Ok(csv),
            Encoder::Gzip(gz) => {
                gz.write_all(&csv)?;
                Ok(std::mem::take(gz.get_mut()))
            }
        }
    }

    /// The file's last bytes.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Encoder::Plain => Ok(Vec::new()),
            Encoder::Gzip(gz) => gz.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn gzip_is_deterministic_and_decompresses_to_the_csv() {
        let write = || {
            let mut e = Encoder::new(Compression::Gzip);
            let mut out = e.encode(b"a,b\r\n".to_vec()).unwrap();
            out.extend(e.encode(b"1,2\r\n".repeat(1000)).unwrap());
            out.extend(e.finish().unwrap());
            out
        };
        let gz = write();
        assert_eq!(gz, write(), "the same CSV, the same bytes");
        let mut csv = String::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut csv).unwrap();
        assert_eq!(csv, format!("a,b\r\n{}", "1,2\r\n".repeat(1000)));
        let mut plain = Encoder::new(Compression::None);
        assert_eq!(plain.encode(b"x".to_vec()).unwrap(), b"x");
    }
}
