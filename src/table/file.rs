//! What a data file is, from its name and its first bytes: a columnar or
//! binary container (Parquet, ORC, Avro, SequenceFile, RCFile), which only
//! an executor that decodes it may rewrite, or text, plain or compressed.
//!
//! The text merge uses this to refuse what byte concatenation would break
//! (a Parquet file concatenated to another opens in no reader), to keep the
//! inputs' extension on its outputs (readers select files by it: a reader
//! globbing `*.jsonl` must see the merged rows), and to keep their
//! compression: gzip members and zstd frames concatenate into a valid
//! stream of the same format; other codecs are refused.

/// A file's content kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Parquet,
    Orc,
    Avro,
    SequenceFile,
    RcFile,
    /// Newline-delimited text, possibly compressed.
    Text(Codec),
}

/// The compression of a text file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Zstd,
    Bzip2,
    Xz,
    Lz4,
    Snappy,
    Deflate,
    Lzo,
}

impl FileKind {
    /// "Parquet", for messages.
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Parquet => "Parquet",
            FileKind::Orc => "ORC",
            FileKind::Avro => "Avro",
            FileKind::SequenceFile => "Hadoop SequenceFile",
            FileKind::RcFile => "RCFile",
            FileKind::Text(c) => c.describe(),
        }
    }

    /// A columnar or binary container: never concatenated.
    pub fn is_container(self) -> bool {
        !matches!(self, FileKind::Text(_))
    }
}

impl Codec {
    pub fn describe(self) -> &'static str {
        match self {
            Codec::None => "text",
            Codec::Gzip => "gzip-compressed text",
            Codec::Zstd => "zstd-compressed text",
            Codec::Bzip2 => "bzip2-compressed text",
            Codec::Xz => "xz-compressed text",
            Codec::Lz4 => "lz4-compressed text",
            Codec::Snappy => "snappy-compressed text",
            Codec::Deflate => "deflate-compressed text",
            Codec::Lzo => "lzo-compressed text",
        }
    }

    /// Concatenating two streams of this codec gives one valid stream that
    /// decodes to the concatenation (gzip members, zstd frames) and
    /// compactd can check each input's end: the text merge keeps it.
    pub fn merges(self) -> bool {
        matches!(self, Codec::None | Codec::Gzip | Codec::Zstd)
    }
}

/// The kind a file's name promises, where its extension tells one.
pub fn by_name(name: &str) -> Option<FileKind> {
    let lower = name.to_ascii_lowercase();
    let ext = lower.rsplit_once('.').map(|(_, e)| e)?;
    Some(match ext {
        "parquet" | "parq" => FileKind::Parquet,
        "orc" => FileKind::Orc,
        "avro" => FileKind::Avro,
        "seq" => FileKind::SequenceFile,
        "rc" | "rcfile" => FileKind::RcFile,
        "gz" | "gzip" => FileKind::Text(Codec::Gzip),
        "zst" | "zstd" => FileKind::Text(Codec::Zstd),
        "bz2" => FileKind::Text(Codec::Bzip2),
        "xz" => FileKind::Text(Codec::Xz),
        "lz4" => FileKind::Text(Codec::Lz4),
        "snappy" | "sz" => FileKind::Text(Codec::Snappy),
        "deflate" => FileKind::Text(Codec::Deflate),
        "lzo" | "lzo_deflate" => FileKind::Text(Codec::Lzo),
        _ => return None,
    })
}

/// The kind a file's first bytes show (at least 10 of them where the file
/// has them); text when none of the known magic numbers matches.
pub fn sniff(head: &[u8]) -> FileKind {
    let starts = |m: &[u8]| head.starts_with(m);
    // "ORC" alone could open a line of text: ORC's header is followed by
    // binary stream bytes, a line of text by more text.
    let binary_after = |n: usize| head.get(n).is_some_and(|b| !(0x20..=0x7e).contains(b) && *b != b'\t');
    if starts(b"PAR1") {
        FileKind::Parquet
    } else if starts(b"ORC") && binary_after(3) {
        FileKind::Orc
    } else if starts(b"Obj\x01") {
        FileKind::Avro
    } else if starts(b"SEQ") && binary_after(3) {
        FileKind::SequenceFile
    } else if starts(b"RCF") && binary_after(3) {
        FileKind::RcFile
    } else if starts(&[0x1f, 0x8b]) {
        FileKind::Text(Codec::Gzip)
    } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
        FileKind::Text(Codec::Zstd)
    } else if starts(b"BZh") && head.get(3).is_some_and(|b| (b'1'..=b'9').contains(b)) {
        FileKind::Text(Codec::Bzip2)
    } else if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        FileKind::Text(Codec::Xz)
    } else if starts(&[0x04, 0x22, 0x4d, 0x18]) {
        FileKind::Text(Codec::Lz4)
    } else if starts(&[0xff, 0x06, 0x00, 0x00, b's', b'N', b'a', b'P', b'p', b'Y']) {
        FileKind::Text(Codec::Snappy)
    } else {
        FileKind::Text(Codec::None)
    }
}

/// Why the text merge must not take the file at `path`, whose content is
/// `kind` (from its name or its first bytes); `None` if it may: text,
/// uncompressed or in a codec whose streams concatenate.
pub fn text_merge_refusal(path: &str, kind: FileKind) -> Option<String> {
    let why = match kind {
        FileKind::Text(c) if c.merges() => return None,
        FileKind::Parquet => "the merge executor concatenates newline-delimited text; the parquet executor rewrites \
                              Parquet files (`--executor parquet`, or `executor = \"parquet\"` in a policy)"
            .to_string(),
        FileKind::Text(c) => format!(
            "the merge executor keeps only gzip and zstd compression (their streams concatenate), not {}",
            c.describe()
        ),
        other => format!(
            "the merge executor concatenates newline-delimited text, and compactd has no executor for {} files",
            other.describe()
        ),
    };
    Some(format!("{path} is {}: {why}", kind.describe()))
}

/// [`text_merge_refusal`] by the file's name alone.
pub fn text_merge_refusal_by_name(path: &str) -> Option<String> {
    by_name(path.rsplit('/').next().unwrap_or(path)).and_then(|k| text_merge_refusal(path, k))
}

/// What readers select a file by: its extension, with the one before it
/// when the last is a compression suffix (`.json.gz`); empty for a name
/// without one (Hive's `000000_0`). Outputs of the text merge end in it.
pub fn extension(name: &str) -> &str {
    let Some(dot) = name.rfind('.').filter(|d| *d > 0) else { return "" };
    let last = &name[dot..];
    if matches!(by_name(last), Some(FileKind::Text(c)) if c != Codec::None) {
        if let Some(prev) = name[..dot].rfind('.').filter(|d| *d > 0) {
            let inner = &name[prev..dot];
            if word(inner) {
                return &name[prev..];
            }
        }
    }
    if word(last) {
        last
    } else {
        ""
    }
}

/// `.jsonl`, `.csv`: a dot, then up to 11 letters and digits, one a letter
/// at least (`.1` of a rotated log, `.01` of a date, are not extensions).
fn word(ext: &str) -> bool {
    let body = &ext[1..];
    (1..=11).contains(&body.len())
        && body.bytes().all(|b| b.is_ascii_alphanumeric())
        && body.bytes().any(|b| b.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_numbers_tell_containers_and_codecs() {
        assert_eq!(sniff(b"PAR1\x15\x00"), FileKind::Parquet);
        assert_eq!(sniff(b"ORC\x0a\x05"), FileKind::Orc);
        assert_eq!(sniff(b"Obj\x01\x04\x14"), FileKind::Avro);
        assert_eq!(sniff(b"SEQ\x06"), FileKind::SequenceFile);
        assert_eq!(sniff(b"RCF\x01"), FileKind::RcFile);
        assert_eq!(sniff(&[0x1f, 0x8b, 8, 0]), FileKind::Text(Codec::Gzip));
        assert_eq!(sniff(&[0x28, 0xb5, 0x2f, 0xfd, 0]), FileKind::Text(Codec::Zstd));
        assert_eq!(sniff(b"BZh91AY&SY"), FileKind::Text(Codec::Bzip2));
        assert_eq!(sniff(b"{\"id\": 1}\n"), FileKind::Text(Codec::None));
        // Text that merely starts like a magic number stays text.
        assert_eq!(sniff(b"ORC,42,x\n"), FileKind::Text(Codec::None));
        assert_eq!(sniff(b"SEQUENCE\n"), FileKind::Text(Codec::None));
        assert_eq!(sniff(b"BZh is not bzip2\n"), FileKind::Text(Codec::None));
        assert_eq!(sniff(b""), FileKind::Text(Codec::None));
    }

    #[test]
    fn names_tell_what_their_extension_promises() {
        assert_eq!(by_name("part-0.parquet"), Some(FileKind::Parquet));
        assert_eq!(by_name("x.ORC"), Some(FileKind::Orc));
        assert_eq!(by_name("e.json.gz"), Some(FileKind::Text(Codec::Gzip)));
        assert_eq!(by_name("e.jsonl"), None);
        assert_eq!(by_name("000000_0"), None);
    }

    #[test]
    fn the_extension_is_what_readers_glob_by() {
        assert_eq!(extension("events-1.jsonl"), ".jsonl");
        assert_eq!(extension("events-1.json.gz"), ".json.gz");
        assert_eq!(extension("log.2024-01-01.txt.zst"), ".txt.zst");
        assert_eq!(extension("000000_0"), "");
        assert_eq!(extension(".hidden"), "");
        assert_eq!(extension("a.b-c"), "");
        assert_eq!(extension("2024.01.01"), "");
        assert_eq!(extension("app.log.1"), "");
        assert_eq!(extension("x.gz"), ".gz");
    }
}
