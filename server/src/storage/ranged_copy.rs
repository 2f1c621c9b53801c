//! Publishing a staged file of any size on S3 (SPEC §5.1): a create-if-absent multipart copy
//! made of ranged part copies.
//!
//! object_store's `copy_if_not_exists` on S3 is a multipart upload with one `UploadPartCopy` of
//! the whole source, and S3 copies at most 5 GiB in one part; so a file above that could never be
//! published. Here the copy is cut into ranges (`x-amz-copy-source-range`), each at most 5 GiB and
//! sized from the file's size so the 10,000-part limit is never reached, and the upload is
//! completed with `If-None-Match: *`, so an object already at the key (the same file, under a
//! content-addressed key) wins and the copy is dropped. The requests are presigned by rusty-s3
//! (the copy headers among the signed ones) and sent with reqwest, each with a bound.

use super::{OnProgress, Presigner, Published};
use futures::{FutureExt, StreamExt, TryStreamExt};
use object_store::path::Path;
use rusty_s3::actions::{AbortMultipartUpload, CompleteMultipartUpload, CreateMultipartUpload, UploadPart};
use rusty_s3::S3Action;
use std::ops::Range;
use std::time::Duration;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// The largest part S3 copies in one `UploadPartCopy`.
pub const COPY_PART_MAX: u64 = 5 * GIB;
/// The most parts one multipart upload may have.
pub const PARTS_MAX: u64 = 10_000;
/// The smallest part S3 takes (all but the last).
pub const PART_MIN: u64 = 5 * MIB;
/// The largest object S3 holds.
pub const OBJECT_MAX: u64 = 5 * 1024 * GIB;
/// The part size used when the size allows it: fewer, larger parts mean fewer requests, and a
/// copy is made inside S3, so a part's size costs no memory here.
pub const PART_FLOOR: u64 = GIB;

/// How long a presigned request stays valid (it is sent at once).
const SIGNED_FOR: Duration = Duration::from_secs(15 * 60);
/// The longest one request may take: a part of up to 5 GiB is copied inside S3 before it
/// answers.
const REQUEST_WITHIN: Duration = Duration::from_secs(10 * 60);
/// Part copies in flight at once.
const IN_FLIGHT: usize = 4;

/// The byte ranges of a ranged copy of a `size`-byte object, in order: they cover it exactly,
/// each is at most [`COPY_PART_MAX`] bytes and at least [`PART_MIN`] (but the last), and there
/// are at most [`PARTS_MAX`]; parts are `floor` bytes unless the size needs larger ones.
pub fn copy_plan(size: u64, floor: u64) -> Result<Vec<Range<u64>>, String> {
    if size > OBJECT_MAX {
        return Err(format!("{size} bytes is more than S3 holds in one object ({OBJECT_MAX})"));
    }
    let part = size.div_ceil(PARTS_MAX).max(floor).max(PART_MIN).min(COPY_PART_MAX);
    Ok((0..size.div_ceil(part)).map(|i| i * part..((i + 1) * part).min(size)).collect())
}

/// A failed S3 request, as object_store reports store errors.
fn failed(what: &str, detail: impl std::fmt::Display) -> object_store::Error {
    object_store::Error::Generic { store: "S3", source: format!("{what}: {detail}").into() }
}

impl Presigner {
    /// The object's name in the bucket (with the store's prefix).
    fn object(&self, key: &Path) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    /// Copies `from` (`size` bytes) to `to` unless an object is there already, in ranged parts
    /// of the plan's sizes; `on_progress` after each part. An upload that does not complete is
    /// aborted (S3 would otherwise keep its parts).
    pub(super) async fn copy_in_ranges(&self, from: &Path, to: &Path, size: u64, floor: u64, on_progress: OnProgress) -> Result<Published, object_store::Error> {
        let plan = copy_plan(size, floor).map_err(|e| failed("ranged copy", e))?;
        let object = self.object(to);
        let create = CreateMultipartUpload::new(&self.bucket, Some(&self.credentials), &object);
        let answer = self.send(self.http.post(create.sign(SIGNED_FOR)), "create multipart upload").await?;
        let created = CreateMultipartUpload::parse_response(&answer).map_err(|e| failed("create multipart upload", e))?;
        let upload_id = created.upload_id().to_owned();
        let copied = self.copy_parts(&plan, from, &object, &upload_id, on_progress).await;
        let completed = match copied {
            Ok(etags) => self.complete(&object, &upload_id, &etags).await,
            Err(e) => Err(e),
        };
        if !matches!(completed, Ok(Published::Created)) {
            let abort = AbortMultipartUpload::new(&self.bucket, Some(&self.credentials), &object, &upload_id);
            if let Err(e) = self.send(self.http.delete(abort.sign(SIGNED_FOR)), "abort multipart upload").await {
                tracing::warn!(key = %to, error = %e, "a multipart copy was not aborted; the bucket's lifecycle rule must remove it");
            }
        }
        completed
    }

    /// Copies each range of `from` as one part; their ETags in order.
    async fn copy_parts(&self, plan: &[Range<u64>], from: &Path, object: &str, upload_id: &str, on_progress: OnProgress) -> Result<Vec<String>, object_store::Error> {
        let source = format!("/{}/{}", self.bucket.name(), percent_encoding::utf8_percent_encode(&self.object(from), KEY));
        // Boxed one by one: a combinator over borrowing closures is not provably `Send`.
        let copies: Vec<futures::future::BoxFuture<'_, Result<String, object_store::Error>>> = plan
            .iter()
            .enumerate()
            .map(|(i, range)| {
                let (source, on_progress) = (source.clone(), on_progress.clone());
                let range = format!("bytes={}-{}", range.start, range.end - 1);
                async move {
                    let number = u16::try_from(i + 1).map_err(|_| failed("ranged copy", "too many parts"))?;
                    let mut part = UploadPart::new(&self.bucket, Some(&self.credentials), object, number, upload_id);
                    part.headers_mut().insert("x-amz-copy-source", source.clone());
                    part.headers_mut().insert("x-amz-copy-source-range", range.clone());
                    let request = self.http.put(part.sign(SIGNED_FOR)).header("x-amz-copy-source", source).header("x-amz-copy-source-range", range);
                    let answer = self.send(request, "upload part copy").await?;
                    let result: CopyPartResult = quick_xml::de::from_str(&answer).map_err(|e| failed("upload part copy", e))?;
                    on_progress();
                    Ok(result.etag)
                }
                .boxed()
            })
            .collect();
        futures::stream::iter(copies).buffered(IN_FLIGHT).try_collect().await
    }

    /// Completes the upload only if no object is at its key yet.
    async fn complete(&self, object: &str, upload_id: &str, etags: &[String]) -> Result<Published, object_store::Error> {
        let mut complete = CompleteMultipartUpload::new(&self.bucket, Some(&self.credentials), object, upload_id, etags.iter().map(String::as_str));
        complete.headers_mut().insert("if-none-match", "*");
        let url = complete.sign(SIGNED_FOR);
        let request = self.http.post(url).header("if-none-match", "*").body(complete.body());
        match request.send().await {
            Ok(answer) if answer.status() == reqwest::StatusCode::PRECONDITION_FAILED => Ok(Published::AlreadyThere),
            Ok(answer) => {
                let status = answer.status();
                let text = answer.text().await.map_err(|e| failed("complete multipart upload", e))?;
                // S3 may answer 200 and report an error in the body.
                if !status.is_success() || text.contains("<Error>") {
                    return Err(failed("complete multipart upload", format!("{status}: {}", error_code(&text))));
                }
                Ok(Published::Created)
            }
            Err(e) => Err(failed("complete multipart upload", e)),
        }
    }

    /// Sends a request; its body when S3 answered with success.
    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> Result<String, object_store::Error> {
        let answer = request.send().await.map_err(|e| failed(what, e))?;
        let status = answer.status();
        let text = answer.text().await.map_err(|e| failed(what, e))?;
        if !status.is_success() || text.contains("<Error>") {
            return Err(failed(what, format!("{status}: {}", error_code(&text))));
        }
        Ok(text)
    }
}

/// The HTTP client the ranged copies use: every request bounded.
pub(super) fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(REQUEST_WITHIN)
        .build()
        .map_err(|e| format!("cannot build the S3 client: {e}"))
}

/// The characters of a key that stay as they are in `x-amz-copy-source` (RFC 3986 unreserved,
/// and `/` between segments).
const KEY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');

/// The answer to a part copy.
#[derive(serde::Deserialize)]
struct CopyPartResult {
    #[serde(rename = "ETag")]
    etag: String,
}

/// An S3 error's code, from its XML body (never the whole body: it may be long).
fn error_code(body: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Error {
        #[serde(rename = "Code")]
        code: String,
    }
    quick_xml::de::from_str::<Error>(body).map(|e| e.code).unwrap_or_else(|_| body.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIB: u64 = 1024 * GIB;

    fn check(size: u64, floor: u64) -> Vec<Range<u64>> {
        let plan = copy_plan(size, floor).unwrap();
        assert!(plan.len() as u64 <= PARTS_MAX, "{size}: {} parts", plan.len());
        let mut at = 0;
        for (i, range) in plan.iter().enumerate() {
            assert_eq!(range.start, at, "{size}: the ranges follow each other");
            assert!(range.end > range.start, "{size}: no empty range");
            assert!(range.end - range.start <= COPY_PART_MAX, "{size}: part {i} is above 5 GiB");
            if i + 1 < plan.len() {
                assert!(range.end - range.start >= PART_MIN, "{size}: part {i} is below S3's minimum");
            }
            at = range.end;
        }
        assert_eq!(at, size, "the ranges cover the object exactly");
        plan
    }

    #[test]
    fn the_ranges_cover_the_object_exactly_each_at_most_5_gib_and_never_more_than_10000_parts() {
        let sizes = [1, PART_MIN - 1, PART_MIN, PART_MIN + 1, GIB, 5 * GIB, 5 * GIB + 1, 17 * GIB + 3, 100 * GIB, TIB, 4 * TIB + 12_345, 5 * TIB - 1, 5 * TIB];
        for size in sizes {
            check(size, PART_FLOOR);
            check(size, PART_MIN);
        }
        // Sizes spread over the whole span, not only the round ones.
        let mut size: u64 = 7;
        while size < 5 * TIB {
            check(size, PART_FLOOR);
            size = size * 3 + 12_345;
        }
        assert_eq!(check(5 * TIB, PART_FLOOR).len(), 5120, "5 TiB in parts of 1 GiB");
        assert_eq!(check(12 * MIB, PART_MIN).len(), 3, "a small floor, for the tests on moto");
    }

    #[test]
    fn an_object_larger_than_s3_holds_has_no_plan() {
        assert!(copy_plan(5 * TIB + 1, PART_FLOOR).is_err());
    }
}
