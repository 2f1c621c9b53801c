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

    /// The bytes of the next chunk of CSV (with gzip, what the encoder has ready so far), valid
    /// until the next call: the CSV itself, or the gzip's output buffer, reused.
    pub fn encode<'a>(&'a mut self, csv: &'a [u8]) -> std::io::Result<&'a [u8]> {
        match self {
            Encoder::Plain => Ok(csv),
            Encoder::Gzip(gz) => {
                gz.get_mut().clear();
                gz.write_all(csv)?;
                Ok(gz.get_ref())
            }
        }
    }

    /// The file's last bytes.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Encoder::Plain => Ok(Vec::new()),
            Encoder::Gzip(mut gz) => {
                // What the last `encode` returned is still in the buffer: taken already.
                gz.get_mut().clear();
                gz.finish()
            }
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
            let mut out = e.encode(b"a,b\r\n").unwrap().to_vec();
            out.extend(e.encode(&b"1,2\r\n".repeat(1000)).unwrap());
            out.extend(e.finish().unwrap());
            out
        };
        let gz = write();
        assert_eq!(gz, write(), "the same CSV, the same bytes");
        let mut csv = String::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut csv).unwrap();
        assert_eq!(csv, format!("a,b\r\n{}", "1,2\r\n".repeat(1000)));
        let mut plain = Encoder::new(Compression::None);
        assert_eq!(plain.encode(b"x").unwrap(), b"x");
    }

    #[test]
    fn bytes_the_gzip_handed_out_are_not_handed_out_again() {
        // Bytes that do not compress, so that each chunk gives out deflated bytes at once.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let csv: Vec<Vec<u8>> = (0..8)
            .map(|_| {
                (0..64 * 1024)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state as u8
                    })
                    .collect()
            })
            .collect();
        let mut e = Encoder::new(Compression::Gzip);
        let mut out = Vec::new();
        for chunk in &csv {
            out.extend_from_slice(e.encode(chunk).unwrap());
        }
        assert!(!out.is_empty(), "deflated bytes came out before the end");
        out.extend(e.finish().unwrap());
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&out[..]).read_to_end(&mut back).unwrap();
        assert_eq!(back, csv.concat());
    }
}
