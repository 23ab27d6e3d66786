//! The command line's parts that need parsing: the tool's arguments (`--arg`,
//! `--args-json`) and the extra HTTP headers (`--header`).

use serde_json::{Map, Value};

/// The tool's arguments from `--args-json` and `--arg` (which wins).
pub fn parse_arguments(args: &[String], args_json: Option<&str>) -> Result<Value, String> {
    let mut out = match args_json {
        Some(j) => match serde_json::from_str::<Value>(j) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("--args-json must be a JSON object".into()),
            Err(e) => return Err(format!("--args-json is not JSON: {e}")),
        },
        None => Map::new(),
    };
    for a in args {
        let (k, v) = a
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--arg {a:?}: expected KEY=VALUE"))?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.into()));
        out.insert(k.into(), value);
    }
    Ok(Value::Object(out))
}

pub(super) fn parse_header(h: &str) -> Result<(http::HeaderName, http::HeaderValue), String> {
    let (k, v) = h
        .split_once(':')
        .ok_or_else(|| format!("--header {h:?}: expected \"Name: value\""))?;
    let name = k
        .trim()
        .parse::<http::HeaderName>()
        .map_err(|e| format!("--header {h:?}: {e}"))?;
    let value =
        http::HeaderValue::from_str(v.trim()).map_err(|e| format!("--header {h:?}: {e}"))?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_json_when_they_parse() {
        let args: Vec<String> = [
            "n=3",
            "name=report.pdf",
            "flag=true",
            "o={\"a\":1}",
            "id=007",
            "e=",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let v = parse_arguments(&args, Some(r#"{"n": 1, "keep": [1]}"#)).unwrap();
        assert_eq!(
            v,
            json!({"n": 3, "name": "report.pdf", "flag": true, "o": {"a": 1}, "id": "007", "e": "", "keep": [1]})
        );
        assert!(parse_arguments(&["novalue".into()], None).is_err());
        assert!(parse_arguments(&["=x".into()], None).is_err());
        assert!(parse_arguments(&[], Some("[1]")).is_err());
        assert!(parse_arguments(&[], Some("{")).is_err());
    }

    #[test]
    fn headers_need_a_name_and_a_value() {
        let (k, v) = parse_header("Authorization: Bearer abc").unwrap();
        assert_eq!(
            (k.as_str(), v.to_str().unwrap()),
            ("authorization", "Bearer abc")
        );
        assert!(parse_header("no-colon").is_err());
        assert!(parse_header("bad name: x").is_err());
    }
}
