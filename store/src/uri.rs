//! Parsing of `--root` / `--data` URIs into a backend description.
//!
//! Accepted forms:
//! - a bare path or `fs:///abs/path` (the embedded default),
//! - `memory://` (one process only; tests),
//! - `s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1`
//!   (credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
//!   `AWS_SESSION_TOKEN`, or OpenDAL's usual config loading when those are
//!   unset),
//! - `hdfs://namenode:port/path`, `hdfs://nameservice/path` (an HA name
//!   service from `HADOOP_CONF_DIR`) or `hdfs:///path` (`fs.defaultFS`),
//! - `webhdfs://host:port/path`, which parses but is refused when the store
//!   opens, with a message pointing to `hdfs://` (WebHDFS offers no
//!   rename that refuses an existing target).
//!
//! A [`RootUri`] prints without secrets: credentials never come from the URI.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootUri {
    Fs {
        root: PathBuf,
    },
    Memory,
    S3 {
        bucket: String,
        prefix: String,
        endpoint: Option<String>,
        region: String,
    },
    Webhdfs {
        endpoint: String,
        root: String,
    },
    /// `url`: `hdfs://<authority>` (`None`: `fs.defaultFS`); `root`: the
    /// absolute folder below it.
    Hdfs {
        url: Option<String>,
        root: String,
    },
}

#[derive(Debug, thiserror::Error)]
#[error("invalid backend URI {uri:?}: {reason}")]
pub struct UriError {
    pub uri: String,
    pub reason: String,
}

impl RootUri {
    pub fn parse(text: &str) -> Result<Self, UriError> {
        let err = |reason: &str| UriError { uri: text.to_string(), reason: reason.to_string() };
        if text.is_empty() {
            return Err(err("empty"));
        }
        let Some((scheme, rest)) = text.split_once("://") else {
            return Ok(RootUri::Fs { root: absolute(PathBuf::from(text)) });
        };
        match scheme {
            "fs" | "file" => {
                if !rest.starts_with('/') {
                    return Err(err("fs URIs take an absolute path: fs:///abs/path"));
                }
                Ok(RootUri::Fs { root: PathBuf::from(rest) })
            }
            "memory" => Ok(RootUri::Memory),
            "s3" => {
                let url = url::Url::parse(text).map_err(|e| err(&e.to_string()))?;
                let bucket = url
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| err("missing bucket: s3://bucket/prefix"))?;
                let mut endpoint = None;
                let mut region = "us-east-1".to_string();
                for (k, v) in url.query_pairs() {
                    match &*k {
                        "endpoint" => endpoint = Some(v.into_owned()),
                        "region" => region = v.into_owned(),
                        other => {
                            return Err(err(&format!(
                                "unknown parameter {other:?} (only endpoint and region; credentials come from AWS_* variables)"
                            )))
                        }
                    }
                }
                let prefix = url.path().trim_matches('/').to_string();
                Ok(RootUri::S3 { bucket: bucket.to_string(), prefix, endpoint, region })
            }
            "webhdfs" => {
                let url = url::Url::parse(text).map_err(|e| err(&e.to_string()))?;
                let host = url.host_str().ok_or_else(|| err("missing host"))?;
                let port = url.port().unwrap_or(9870);
                Ok(RootUri::Webhdfs { endpoint: format!("http://{host}:{port}"), root: url.path().to_string() })
            }
            "hdfs" => {
                let url = url::Url::parse(text).map_err(|e| err(&e.to_string()))?;
                if url.query().is_some() || url.fragment().is_some() {
                    return Err(err(
                        "hdfs URIs take no parameters: hdfs://namenode:port/path or hdfs://nameservice/path \
                         (name services, HA and Kerberos come from HADOOP_CONF_DIR)",
                    ));
                }
                if !url.username().is_empty() || url.password().is_some() {
                    return Err(err("hdfs URIs carry no user: set HADOOP_USER_NAME, or use Kerberos"));
                }
                let authority = match (url.host_str(), url.port()) {
                    (Some(h), Some(p)) if !h.is_empty() => Some(format!("hdfs://{h}:{p}")),
                    (Some(h), None) if !h.is_empty() => Some(format!("hdfs://{h}")),
                    _ => None,
                };
                let root = url.path().trim_end_matches('/');
                let root = if root.is_empty() { "/".to_string() } else { root.to_string() };
                Ok(RootUri::Hdfs { url: authority, root })
            }
            other => Err(err(&format!("unknown scheme {other:?} (fs, memory, s3, webhdfs, hdfs)"))),
        }
    }

    /// Short backend name for messages: `fs`, `memory`, `s3`, ….
    pub fn scheme(&self) -> &'static str {
        match self {
            RootUri::Fs { .. } => "fs",
            RootUri::Memory => "memory",
            RootUri::S3 { .. } => "s3",
            RootUri::Webhdfs { .. } => "webhdfs",
            RootUri::Hdfs { .. } => "hdfs",
        }
    }
}

fn absolute(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
    }
}

impl fmt::Display for RootUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootUri::Fs { root } => write!(f, "fs://{}", root.display()),
            RootUri::Memory => f.write_str("memory://"),
            RootUri::S3 { bucket, prefix, endpoint, region } => {
                write!(f, "s3://{bucket}/{prefix}?region={region}")?;
                if let Some(e) = endpoint {
                    write!(f, "&endpoint={e}")?;
                }
                Ok(())
            }
            RootUri::Webhdfs { endpoint, root } => {
                write!(f, "webhdfs://{}{root}", endpoint.trim_start_matches("http://"))
            }
            RootUri::Hdfs { url, root } => write!(f, "{}{root}", url.as_deref().unwrap_or("hdfs://")),
        }
    }
}

impl std::str::FromStr for RootUri {
    type Err = UriError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RootUri::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_form() {
        assert_eq!(RootUri::parse("fs:///tmp/x").unwrap(), RootUri::Fs { root: "/tmp/x".into() });
        assert!(matches!(RootUri::parse("./cluster.compact").unwrap(), RootUri::Fs { root } if root.is_absolute()));
        assert_eq!(RootUri::parse("memory://").unwrap(), RootUri::Memory);
        let s3 = RootUri::parse("s3://b/p/q?endpoint=http://127.0.0.1:9000&region=eu-west-1").unwrap();
        assert_eq!(
            s3,
            RootUri::S3 {
                bucket: "b".into(),
                prefix: "p/q".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: "eu-west-1".into()
            }
        );
        assert!(RootUri::parse("s3://b/?secret_access_key=hunter2")
            .unwrap_err()
            .to_string()
            .contains("unknown parameter"));
        assert!(!RootUri::parse("s3://b/?secret_access_key=hunter2").unwrap_err().reason.contains("hunter2"));
        assert!(RootUri::parse("gopher://x").is_err());
        assert!(RootUri::parse("fs://relative").is_err());
        assert!(RootUri::parse("").is_err());
    }
}
