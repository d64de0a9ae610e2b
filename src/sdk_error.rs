//! AWS SDK errors as one short line, for every room that calls AWS (the
//! state store below the cloud, and the cloud): the service's code and
//! message, an error page's title, or what to check when nothing answered.

/// The innermost causes of an error, by their Display, without repeats.
fn source_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.last().cloned().unwrap_or_else(|| err.to_string())
}

/// The longest error message shown inside a line.
const MESSAGE_MAX: usize = 200;

/// An error message as one short line: an HTML page (a proxy's or an
/// emulator's 500) gives its title or first heading, tags are dropped,
/// whitespace and control characters collapse, and the rest is cut.
pub fn one_line(message: &str) -> String {
    let lower = message.to_ascii_lowercase();
    let html = lower.contains("<html") || lower.contains("<!doctype") || lower.contains("<body");
    let text = if html {
        let inner = |tag: &str| -> Option<&str> {
            let open = lower.find(&format!("<{tag}"))?;
            let start = open + lower[open..].find('>')? + 1;
            let end = start + lower[start..].find(&format!("</{tag}"))?;
            Some(&message[start..end])
        };
        ["title", "h1", "p"].iter().find_map(|t| inner(t).filter(|s| !s.trim().is_empty())).unwrap_or(message)
    } else {
        message
    };
    // Drop whatever tags are left, then collapse whitespace and controls.
    let mut plain = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' if html => in_tag = true,
            '>' if html && in_tag => in_tag = false,
            _ if in_tag => {}
            c if c.is_control() || c.is_whitespace() => plain.push(' '),
            c => plain.push(c),
        }
    }
    let words: Vec<&str> = plain.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= MESSAGE_MAX {
        return line;
    }
    let cut: String = line.chars().take(MESSAGE_MAX).collect();
    format!("{cut}…")
}

/// A readable message for an SDK error: the service's code and message when
/// there is one, and a hint for the usual causes (no credentials, nothing
/// listening at the endpoint).
pub fn describe_sdk_error<E>(err: &aws_sdk_ec2::error::SdkError<E, aws_smithy_runtime_api::http::Response>) -> String
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    use aws_sdk_ec2::error::SdkError;
    match err {
        SdkError::ServiceError(e) => {
            let m = e.err();
            match m.code() {
                Some(code) => format!("{code}: {}", one_line(m.message().unwrap_or("(no message)"))),
                // An error body the SDK could not parse: the HTTP status says
                // what happened.
                None => {
                    let status = e.raw().status().as_u16();
                    let meaning = match status {
                        401 | 403 => " (the credentials are not valid or not allowed)",
                        _ => "",
                    };
                    let body = e.raw().body().bytes().map(String::from_utf8_lossy).unwrap_or_default();
                    let body = one_line(&body);
                    format!("HTTP {status}{meaning}: {}", if body.is_empty() { "(no message)" } else { &body })
                }
            }
        }
        SdkError::DispatchFailure(d) => {
            let debug = format!("{err:?}");
            if debug.contains("CredentialsNotLoaded") || debug.contains("ProviderChainError") {
                return "no AWS credentials found (tried the environment, profiles, web identity, ECS and instance metadata): \
                        set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
                    .to_string();
            }
            let endpoint = std::env::var("AWS_ENDPOINT_URL").map(|e| format!(" {e}")).unwrap_or_default();
            let cause = source_chain(err);
            if d.is_io() || d.is_timeout() {
                format!(
                    "cannot reach the AWS endpoint{endpoint} (is it running, and is AWS_ENDPOINT_URL right?): {cause}"
                )
            } else {
                format!("request failed before reaching AWS{endpoint}: {cause}")
            }
        }
        SdkError::ConstructionFailure(_) => {
            format!("could not build the request (are AWS credentials and region configured?): {}", source_chain(err))
        }
        SdkError::TimeoutError(_) => "the AWS call timed out".to_string(),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn an_error_page_is_kept_to_its_title_and_a_message_to_one_short_line() {
        let moto_500 = "<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n<p>The server encountered an internal error and was unable to complete your request.</p>\n";
        assert_eq!(one_line(moto_500), "500 Internal Server Error");
        let untitled = "<html><body><h1>Bad  Gateway</h1><p>nginx</p></body></html>";
        assert_eq!(one_line(untitled), "Bad Gateway");
        assert_eq!(
            one_line("The image id '[ami-1]'\ndoes not exist\u{1b}[31m"),
            "The image id '[ami-1]' does not exist [31m"
        );
        // A comparison in a plain message is not a tag.
        assert_eq!(one_line("count < 5 and > 2"), "count < 5 and > 2");
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).chars().count(), 201);
        assert!(one_line(&long).ends_with('…'));
    }
}
