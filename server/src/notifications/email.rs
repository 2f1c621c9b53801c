//! Emails of finished operations over SMTP (contract §15): `EXPORTD_SMTP_URL` (`smtp://host:port`
//! uses STARTTLS when the server offers it; `?tls=required` insists on it, `smtps://` is TLS from
//! the first byte; credentials in the URL's user and password), from `EXPORTD_SMTP_FROM`, in the
//! request's language, with a link to the operation on the page and nothing of its data.

use super::webhook::Attempt;
use crate::config::NotifyConfig;
use lettre::message::{header::ContentType, Mailbox};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::time::Duration;

/// The longest one exchange with the SMTP server may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The longest an email's whole delivery may take (less than a claim: see
/// [`super::delivery::CLAIM_AT_LEAST`]).
pub const TOTAL: Duration = Duration::from_secs(15);

/// The subject and text of the email of `event_type` (`export.ready`, …) for operation `id`
/// of `subject` (a report or dataset), linking to `page_url`.
pub fn text(language: &str, event_type: &str, id: &str, subject: &str, page_url: &str) -> (String, String) {
    let (kind, status) = event_type.split_once('.').unwrap_or((event_type, ""));
    if language == "ar" {
        let what = if kind == "import" { "الاستيراد" } else { "التصدير" };
        let state = match status {
            "ready" => "اكتمل",
            "failed" => "فشل",
            "cancelled" => "أُلغي",
            _ => "انتهى",
        };
        (
            format!("{state} {what}: {subject}"),
            format!(
                "{state} {what} «{subject}» ({id}).\n\n{}\n{page_url}\n\nلا تحمل هذه الرسالة أي بيانات ولا رابط تنزيل.\n",
                if status == "ready" { "افتحه في exportd لترى حالته وتنزّل ملفه بعد تسجيل الدخول:" } else { "افتحه في exportd لترى ما جرى، بعد تسجيل الدخول:" }
            ),
        )
    } else {
        let what = if kind == "import" { "import" } else { "export" };
        let state = match status {
            "ready" => "is ready",
            "failed" => "failed",
            "cancelled" => "was cancelled",
            _ => "ended",
        };
        (
            format!("Your {what} of {subject} {state}"),
            format!(
                "Your {what} of {subject} ({id}) {state}.\n\n{}\n{page_url}\n\nThis message carries no data and no download link.\n",
                if status == "ready" { "Open it in exportd to see its status and, once signed in, download its file:" } else { "Open it in exportd, once signed in, to see what happened:" }
            ),
        )
    }
}

/// The SMTP URL with STARTTLS-when-offered as its default.
fn with_default_tls(url: &str) -> String {
    if url.starts_with("smtp://") && !url.contains("tls=") {
        let join = if url.contains('?') { '&' } else { '?' };
        format!("{url}{join}tls=opportunistic")
    } else {
        url.to_owned()
    }
}

/// Sends one email to `to`.
pub async fn send(config: &NotifyConfig, to: &str, subject: &str, body: &str) -> Attempt {
    let failed = |outcome: &'static str, detail: String| Attempt { outcome, status_code: None, detail: Some(detail) };
    let (Some(url), Some(from)) = (&config.smtp_url, &config.smtp_from) else {
        return failed("error", "EXPORTD_SMTP_URL or EXPORTD_SMTP_FROM is not set".into());
    };
    let from: Mailbox = match from.parse() {
        Ok(from) => from,
        Err(e) => return failed("error", format!("EXPORTD_SMTP_FROM: {e}")),
    };
    let to: Mailbox = match to.parse() {
        Ok(to) => to,
        Err(e) => return failed("refused", format!("the address: {e}")),
    };
    let message = match Message::builder().from(from).to(to).subject(subject).header(ContentType::TEXT_PLAIN).body(body.to_owned()) {
        Ok(message) => message,
        Err(e) => return failed("error", format!("the message: {e}")),
    };
    let transport = match AsyncSmtpTransport::<Tokio1Executor>::from_url(&with_default_tls(url)) {
        Ok(builder) => builder.timeout(Some(TIMEOUT)).build(),
        Err(e) => return failed("error", format!("EXPORTD_SMTP_URL: {e}")),
    };
    match tokio::time::timeout(TOTAL, transport.send(message)).await {
        Ok(Ok(answer)) => Attempt { outcome: "delivered", status_code: Some(i32::from(u16::from(answer.code()))), detail: None },
        Ok(Err(e)) if e.is_permanent() => failed("rejected", format!("{e}")),
        Ok(Err(e)) => failed("error", format!("{e}")),
        Err(_) => failed("timeout", format!("the SMTP server did not answer in {} s", TOTAL.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_in_the_language_asked_and_links_to_the_page() {
        let (subject, body) = text("en", "export.ready", "exp_1", "orders", "https://x.example/?operation=exp_1");
        assert_eq!(subject, "Your export of orders is ready");
        assert!(body.contains("https://x.example/?operation=exp_1"));
        let (subject, body) = text("ar", "import.failed", "imp_1", "customers", "https://x.example/?operation=imp_1");
        assert!(subject.starts_with("فشل الاستيراد"));
        assert!(body.contains("https://x.example/?operation=imp_1"));
        let (_, body) = text("en", "export.failed", "exp_2", "orders", "https://x.example/?operation=exp_2");
        assert!(!body.contains("download its file"), "{body}");
    }

    #[test]
    fn starttls_when_offered_is_the_default_and_an_explicit_choice_is_kept() {
        assert_eq!(with_default_tls("smtp://mail:25"), "smtp://mail:25?tls=opportunistic");
        assert_eq!(with_default_tls("smtp://mail:587?tls=required"), "smtp://mail:587?tls=required");
        assert_eq!(with_default_tls("smtps://mail"), "smtps://mail");
    }
}
