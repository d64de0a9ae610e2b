//! Printing results for people and for pipelines: `-o text|json|yaml`, with
//! colour only on a terminal and never under NO_COLOR (anstream decides).

use std::io::Write;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
    Yaml,
}

/// Writes `value` as JSON or YAML to stdout.
pub fn print_data<T: Serialize>(format: Format, value: &T) -> anyhow::Result<()> {
    let text = match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(value)?;
            s.push('\n');
            s
        }
        Format::Yaml | Format::Text => serde_saphyr::to_string(value)?,
    };
    let mut out = anstream::stdout();
    out.write_all(text.as_bytes())?;
    Ok(())
}
