//! The text format of the merge: newline-delimited files concatenated in
//! groups of at most the target size. Staging only; the commit protocol is
//! the parent's.
//!
//! - **Only text.** Each input's first bytes are checked as it is read
//!   ([`crate::table::file::sniff`]), and names promising a container are
//!   refused before anything is read: a Parquet, ORC or Avro file
//!   concatenated to another opens in no reader, so such a partition fails
//!   the unit naming the file and the executor that rewrites it.
//! - **Outputs keep what readers select on.** Inputs are grouped by their
//!   extension ([`crate::table::file::extension`]), and each output ends in
//!   its group's (`compacted-<task>-r<round>-<k>.jsonl`): a reader globbing
//!   `*.jsonl` sees every merged row. gzip and zstd inputs stay compressed:
//!   their members and frames are concatenated (a valid stream of the same
//!   codec), and an input whose text does not end in a newline gets one
//!   more member or frame holding just `\n`. Other codecs are refused.
//! - **Streamed.** Inputs are read in chunks of [`CHUNK`] and outputs
//!   written as they go, so memory does not grow with a group's size.

use std::io::Write;

use bytes::{Bytes, BytesMut};

use super::*;
use crate::table::file::{self, Codec, FileKind};

/// Bytes read from an input, and written to an output, at once.
pub const CHUNK: u64 = 8 << 20;

/// Stages the concatenation of small text files: per extension, greedy
/// groups in name order of at most the target size (a group of one file is
/// left alone).
pub(super) async fn stage(
    store: &Store,
    job: &MergeJob,
    files: Vec<(String, u64)>,
    staging: &str,
) -> Result<Staged, MergeError> {
    let small: Vec<(String, u64)> = files.into_iter().filter(|(_, len)| *len < job.target_size).collect();
    // Refused by name before anything is read or written.
    if let Some(why) = small.iter().find_map(|(p, _)| file::text_merge_refusal_by_name(p)) {
        return Err(job.broken(format!("{why}; nothing was merged")));
    }
    let mut by_ext: BTreeMap<&str, Vec<(String, u64)>> = BTreeMap::new();
    for f in &small {
        by_ext.entry(file::extension(name_of(&f.0))).or_default().push(f.clone());
    }
    let mut groups: Vec<(&str, Vec<(String, u64)>)> = vec![];
    for (ext, files) in by_ext {
        let mut size = 0;
        let first = groups.len();
        for f in files {
            if groups.len() == first || size + f.1 > job.target_size {
                groups.push((ext, vec![]));
                size = 0;
            }
            size += f.1;
            groups.last_mut().expect("pushed above").1.push(f);
        }
    }
    groups.retain(|(_, g)| g.len() > 1);
    let mut staged = Staged::default();
    let (mut bytes_in, mut bytes_out, mut rows) = (0u64, 0u64, 0u64);
    for (k, (ext, group)) in groups.iter().enumerate() {
        let path = format!("{staging}{k}");
        let mut out = Sink { w: store.writer(&path).await?, buf: BytesMut::new(), io: &job.io, written: 0 };
        let mut codec: Option<(Codec, &str)> = None;
        for (input, len) in group {
            let r = copy(store, job, input, *len, &mut out, &mut codec).await?;
            bytes_in += len;
            rows += r;
        }
        bytes_out += out.close().await?;
        staged.outputs.push(Output {
            staged: path,
            final_path: format!("{}compacted-{}-r{}-{k}{ext}", job.dir, job.task, job.round),
            inputs: group.iter().map(|f| f.0.clone()).collect(),
        });
    }
    if !staged.outputs.is_empty() {
        let files_in = groups.iter().map(|(_, g)| g.len()).sum::<usize>() as u64;
        staged.stats = stats(files_in, staged.outputs.len() as u64, bytes_in, bytes_out, rows, rows);
    }
    Ok(staged)
}

fn refused(job: &MergeJob, path: &str, kind: FileKind) -> MergeError {
    let why = file::text_merge_refusal(path, kind).unwrap_or_else(|| format!("{path}: unexpected {}", kind.describe()));
    job.broken(format!("{why}; nothing was merged"))
}

/// An output being written: small writes gathered into chunks.
struct Sink<'a> {
    w: store::StoreWriter,
    buf: BytesMut,
    io: &'a super::super::throttle::Throttle,
    written: u64,
}

impl Sink<'_> {
    async fn write(&mut self, b: &[u8]) -> Result<(), MergeError> {
        self.buf.extend_from_slice(b);
        if self.buf.len() as u64 >= CHUNK {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), MergeError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.io.take(chunk.len() as u64).await?;
        self.written += chunk.len() as u64;
        self.w.write(chunk).await?;
        Ok(())
    }

    /// Closes the output; its size in bytes.
    async fn close(mut self) -> Result<u64, MergeError> {
        self.flush().await?;
        self.w.close().await?;
        Ok(self.written)
    }
}

/// Counts the lines of the text that passes through and remembers its
/// last byte.
#[derive(Default)]
struct Lines {
    newlines: u64,
    last: Option<u8>,
}

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.newlines += b.iter().filter(|c| **c == b'\n').count() as u64;
        if let Some(l) = b.last() {
            self.last = Some(*l);
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What an input's bytes decode to, as they pass.
enum Decode {
    Plain(Lines),
    Gzip(Box<flate2::write::MultiGzDecoder<Lines>>),
    Zstd(Box<zstd::stream::write::Decoder<'static, Lines>>),
}

impl Decode {
    fn new(codec: Codec) -> std::io::Result<Decode> {
        Ok(match codec {
            Codec::Gzip => Decode::Gzip(Box::new(flate2::write::MultiGzDecoder::new(Lines::default()))),
            Codec::Zstd => Decode::Zstd(Box::new(zstd::stream::write::Decoder::new(Lines::default())?)),
            _ => Decode::Plain(Lines::default()),
        })
    }

    fn feed(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Decode::Plain(l) => l.write_all(b),
            Decode::Gzip(d) => d.write_all(b),
            Decode::Zstd(d) => d.write_all(b),
        }
    }

    /// The decoded text's lines and last byte, once the input has ended
    /// (an incomplete stream is an error).
    fn finish(self) -> std::io::Result<Lines> {
        match self {
            Decode::Plain(l) => Ok(l),
            Decode::Gzip(d) => d.finish(),
            // `finish` fails on a stream that ends inside a frame.
            Decode::Zstd(d) => d.finish(),
        }
    }
}

/// The bytes that end a text of `codec` with a newline.
fn newline(codec: Codec) -> std::io::Result<Vec<u8>> {
    match codec {
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(vec![], flate2::Compression::default());
            e.write_all(b"\n")?;
            e.finish()
        }
        Codec::Zstd => zstd::stream::encode_all(&b"\n"[..], 1),
        _ => Ok(b"\n".to_vec()),
    }
}

/// Appends one input to the output, chunk by chunk; its lines. All inputs
/// of an output share one codec (`codec`: the first input's, with its path).
async fn copy<'p>(
    store: &Store,
    job: &MergeJob,
    path: &'p str,
    len: u64,
    out: &mut Sink<'_>,
    codec: &mut Option<(Codec, &'p str)>,
) -> Result<u64, MergeError> {
    let mut decode: Option<Decode> = None;
    let mut offset = 0u64;
    while offset < len {
        let want = CHUNK.min(len - offset);
        job.io.take(want).await?;
        let bytes: Bytes = store
            .read_range(path, offset, want)
            .await?
            .ok_or_else(|| job.broken(format!("input {path} vanished while staging")))?;
        if bytes.len() as u64 != want {
            return Err(job.broken(format!("input {path} changed size while staging; nothing was merged")));
        }
        if decode.is_none() {
            let kind = file::sniff(&bytes);
            let FileKind::Text(c) = kind else { return Err(refused(job, path, kind)) };
            if !c.merges() {
                return Err(refused(job, path, kind));
            }
            match codec {
                None => *codec = Some((c, path)),
                Some((first, first_path)) if *first != c => {
                    return Err(job.broken(format!(
                        "{path} is {} but {first_path}, merged into the same output, is {}; nothing was merged",
                        c.describe(),
                        first.describe()
                    )));
                }
                Some(_) => {}
            }
            decode = Some(Decode::new(c).map_err(|e| job.broken(format!("{path}: {e}")))?);
        }
        decode
            .as_mut()
            .expect("set above")
            .feed(&bytes)
            .map_err(|e| job.broken(format!("{path} does not decode as its codec: {e}; nothing was merged")))?;
        out.write(&bytes).await?;
        offset += want;
    }
    let Some(decode) = decode else { return Ok(0) };
    let c = codec.map(|(c, _)| c).unwrap_or(Codec::None);
    let text =
        decode.finish().map_err(|e| job.broken(format!("{path} is truncated or corrupt: {e}; nothing was merged")))?;
    let mut lines = text.newlines;
    if text.last.is_some_and(|b| b != b'\n') {
        // Its last line must not run into the next file's first.
        out.write(&newline(c).map_err(|e| job.broken(format!("encoding a newline: {e}")))?).await?;
        lines += 1;
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::super::{run_with_stats, MergeJob, Outcome};
    use super::*;

    fn job() -> MergeJob {
        MergeJob {
            dir: "db/s/t/p/".into(),
            task: "aaaaffff.16176931.56000000.0".into(),
            round: 1,
            attempt: 1,
            target_size: 1 << 20,
            delay_before_commit: std::time::Duration::ZERO,
            min_age: std::time::Duration::ZERO,
            fence: None,
            now: std::time::UNIX_EPOCH,
            format: super::super::Format::Lines,
            io: Default::default(),
        }
    }

    fn gzip(text: &str) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(vec![], flate2::Compression::fast());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }

    async fn names(store: &Store) -> Vec<String> {
        let mut n: Vec<String> = data_files(store, "db/s/t/p/")
            .await
            .unwrap()
            .into_iter()
            .map(|(p, _)| p.rsplit('/').next().unwrap().to_string())
            .collect();
        n.sort();
        n
    }

    #[tokio::test]
    async fn outputs_keep_their_inputs_extension_and_compression() {
        let store = Store::memory().await;
        for i in 0..3 {
            store.put(&format!("db/s/t/p/a-{i}.jsonl"), format!("{{\"a\":{i}}}\n")).await.unwrap();
            // The last gzip member's text has no final newline.
            let text = if i == 2 { format!("g{i}") } else { format!("g{i}\n") };
            store.put(&format!("db/s/t/p/g-{i}.json.gz"), gzip(&text)).await.unwrap();
            let z = zstd::stream::encode_all(format!("z{i}\n").as_bytes(), 3).unwrap();
            store.put(&format!("db/s/t/p/z-{i}.log.zst"), z).await.unwrap();
        }
        let (outcome, stats) = run_with_stats(&store, &job()).await.unwrap();
        assert_eq!(outcome, Outcome::Merged { inputs: 9, outputs: 3 });
        assert_eq!(stats["rows_in"], 9);
        let names = names(&store).await;
        let t = "aaaaffff.16176931.56000000.0";
        let want: Vec<String> = [".json.gz", ".jsonl", ".log.zst"]
            .iter()
            .enumerate()
            .map(|(k, e)| format!("compacted-{t}-r1-{k}{e}"))
            .collect();
        assert_eq!(names, want);
        let mut bodies = vec![];
        for w in &want {
            bodies.push(store.read(&format!("db/s/t/p/{w}")).await.unwrap().unwrap().to_vec());
        }
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(&bodies[0][..]).read_to_string(&mut text).unwrap();
        assert_eq!(text, "g0\ng1\ng2\n", "one gzip stream, a newline added as its own member");
        assert_eq!(String::from_utf8(bodies[1].clone()).unwrap(), "{\"a\":0}\n{\"a\":1}\n{\"a\":2}\n");
        let z = zstd::stream::decode_all(&bodies[2][..]).unwrap();
        assert_eq!(String::from_utf8(z).unwrap(), "z0\nz1\nz2\n");
    }

    #[tokio::test]
    async fn columnar_files_and_other_codecs_are_refused_and_nothing_is_touched() {
        // Each beside a text file of its extension, so that it is in a group
        // that would be merged.
        for (name, body, says) in [
            ("part-0.parquet", b"PAR1....PAR1".to_vec(), "is Parquet"),
            ("000000_0", b"PAR1\x15\x04\x15\x10PAR1".to_vec(), "is Parquet"),
            ("000000_1", b"ORC\x11\x00\x00".to_vec(), "is ORC"),
            ("x.avro", b"Obj\x01".to_vec(), "is Avro"),
            ("x.txt.bz2", b"BZh91AY&SY".to_vec(), "bzip2"),
            ("x.txt", b"BZh91AY&SY".to_vec(), "bzip2"),
        ] {
            let store = Store::memory().await;
            let ext = file::extension(name);
            store.put(&format!("db/s/t/p/a{ext}"), "a\n").await.unwrap();
            store.put(&format!("db/s/t/p/{name}"), body).await.unwrap();
            store.put(&format!("db/s/t/p/zz{ext}"), "b\n").await.unwrap();
            let before = names(&store).await;
            let err = run_with_stats(&store, &job()).await.unwrap_err().to_string();
            assert!(err.contains(says), "{name}: {err}");
            assert_eq!(names(&store).await, before, "{name}");
            assert!(store.list("db/s/t/p/_compactd/staging/").await.unwrap().iter().all(|e| e.is_dir), "{name}");
        }
    }

    #[tokio::test]
    async fn a_truncated_gzip_or_zstd_input_is_refused() {
        let zstd = |t: &str| zstd::stream::encode_all(t.as_bytes(), 3).unwrap();
        for (ext, whole, torn) in [("gz", gzip("a\n"), gzip("b\nc\n")), ("zst", zstd("a\n"), zstd("b\nc\n"))] {
            let store = Store::memory().await;
            store.put(&format!("db/s/t/p/a.{ext}"), whole).await.unwrap();
            let mut torn = torn;
            torn.truncate(torn.len() - 4);
            store.put(&format!("db/s/t/p/b.{ext}"), torn).await.unwrap();
            let err = run_with_stats(&store, &job()).await.unwrap_err().to_string();
            assert!(err.contains(&format!("db/s/t/p/b.{ext}")) && err.contains("truncated or corrupt"), "{err}");
            assert_eq!(names(&store).await, [format!("a.{ext}"), format!("b.{ext}")]);
        }
    }

    #[tokio::test]
    async fn a_table_of_another_format_is_refused_before_anything_is_read() {
        let store = Store::memory().await;
        store.put("db/s/t/_delta_log/00000000000000000000.json", "{}").await.unwrap();
        store.put("db/s/t/p/a.txt", "a\n").await.unwrap();
        store.put("db/s/t/p/b.txt", "b\n").await.unwrap();
        let err = run_with_stats(&store, &job()).await.unwrap_err().to_string();
        assert!(err.contains("is a Delta Lake table") && err.contains("merge executor never changes it"), "{err}");
        assert_eq!(names(&store).await, ["a.txt", "b.txt"]);
        assert!(store.list("db/s/t/p/_compactd/").await.unwrap().is_empty(), "nothing of compactd's was written");
    }
}
