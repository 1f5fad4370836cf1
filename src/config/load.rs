//! From TOML text and environment variables to a validated [`Config`], remembering where each
//! value came from.

use std::collections::BTreeMap;
use std::ffi::OsString;

use super::provenance::Provenance;
use super::{Config, ConfigError, validate};

/// Prefix of the environment variables that override settings.
pub const ENV_PREFIX: &str = "LIMITMESH__";

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn toml_error(file: &str, text: &str, err: &toml::de::Error) -> ConfigError {
    let (line, column) = err
        .span()
        .map_or((1, 1), |span| line_column(text, span.start));
    ConfigError::Toml {
        file: file.to_owned(),
        line,
        column,
        message: err.message().trim_end().to_owned(),
    }
}

/// The line of every `section.key` set in the file.
fn file_lines(text: &str) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    let Ok(root) = toml::de::DeTable::parse(text) else {
        return lines;
    };
    for (section, value) in root.get_ref() {
        let Some(table) = value.get_ref().as_table() else {
            continue;
        };
        for (key, _) in table {
            let field = format!("{}.{}", section.get_ref(), key.get_ref());
            lines.insert(field, line_column(text, key.span().start).0);
        }
    }
    lines
}

/// Turns an environment value into the TOML value of the setting it overrides, typed like the
/// setting's default.
fn env_value(template: &toml::Value, raw: &str) -> Result<toml::Value, String> {
    match template {
        toml::Value::String(_) => Ok(toml::Value::String(raw.to_owned())),
        toml::Value::Integer(_) => raw
            .trim()
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| format!("`{raw}` is not an integer")),
        toml::Value::Boolean(_) => match raw.trim() {
            "true" => Ok(toml::Value::Boolean(true)),
            "false" => Ok(toml::Value::Boolean(false)),
            _ => Err(format!("`{raw}` is not `true` or `false`")),
        },
        toml::Value::Array(_) => Ok(toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| toml::Value::String(item.to_owned()))
                .collect(),
        )),
        other => Err(format!(
            "settings of type {} cannot be set from the environment",
            other.type_str()
        )),
    }
}

/// Parses `text` (named `file` in errors), applies the `LIMITMESH__` variables of `env` and
/// validates.
pub(crate) fn parse(
    file: &str,
    text: &str,
    env: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Config, ConfigError> {
    let from_file: Config = toml::from_str(text).map_err(|e| toml_error(file, text, &e))?;
    let mut provenance = Provenance {
        file: file.to_owned(),
        file_lines: file_lines(text),
        env_vars: BTreeMap::new(),
    };

    // Sorted, so that the first error reported does not depend on the environment's order.
    let mut overrides = BTreeMap::new();
    for (name, value) in env {
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(ENV_PREFIX) {
            continue;
        }
        let value = value.into_string().map_err(|_| ConfigError::Env {
            var: name.to_owned(),
            message: "value is not valid UTF-8".to_owned(),
        })?;
        overrides.insert(name.to_owned(), value);
    }

    let config =
        if overrides.is_empty() {
            from_file
        } else {
            let mut table = toml::Table::try_from(&from_file).map_err(|e| ConfigError::Env {
                var: ENV_PREFIX.to_owned(),
                message: format!("cannot apply overrides: {e}"),
            })?;
            let mut config = from_file;
            for (var, raw) in &overrides {
                let env_err = |message: String| ConfigError::Env {
                    var: var.clone(),
                    message,
                };
                let path = &var[ENV_PREFIX.len()..];
                let (section, key) = match path.split_once("__") {
                    Some((s, k)) if !s.is_empty() && !k.is_empty() && !k.contains("__") => {
                        (s.to_ascii_lowercase(), k.to_ascii_lowercase())
                    }
                    _ => {
                        return Err(env_err(format!(
                            "expected {ENV_PREFIX}SECTION__KEY, e.g. {ENV_PREFIX}GRPC__LISTEN"
                        )));
                    }
                };
                let field = format!("{section}.{key}");
                let slot = table
                    .get_mut(&section)
                    .and_then(toml::Value::as_table_mut)
                    .and_then(|t| t.get_mut(&key))
                    .ok_or_else(|| env_err(format!("no setting `{field}`")))?;
                *slot = env_value(slot, raw).map_err(env_err)?;
                // Checked one variable at a time, so that a value of the wrong kind is blamed on
                // the variable that set it.
                config = toml::Value::Table(table.clone()).try_into().map_err(
                    |e: toml::de::Error| env_err(format!("{field}: {}", e.message().trim_end())),
                )?;
                provenance.env_vars.insert(field, var.clone());
            }
            config
        };

    validate::validate(&config, &provenance)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_chars_from_one() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 10), (2, 4), "é is one column");
        assert_eq!(line_column(text, 999), (3, 1));
    }

    #[test]
    fn file_lines_cover_tables_and_inline_tables() {
        let lines = file_lines("[grpc]\n\nlisten = \"x\"\nhttp = { listen = \"y\" }\n");
        assert_eq!(lines.get("grpc.listen"), Some(&3));
        let inline = file_lines("http = { listen = \"y\" }\n");
        assert_eq!(inline.get("http.listen"), Some(&1));
    }
}
