//! Spark's conventions in a Parquet footer's key-value metadata, and what a
//! rewrite keeps so that Spark reads every rewritten value as it read the
//! original.
//!
//! Spark stores dates before 1582-10-15 and timestamps before
//! 1900-01-01T00:00:00Z either as they are (proleptic Gregorian,
//! "CORRECTED") or rebased to the hybrid Julian calendar ("LEGACY"), and
//! decides per file how to read them back (`DataSourceUtils.getRebaseSpec`):
//! - a file with `org.apache.spark.version`: LEGACY if that version sorts
//!   below "3.0.0" (a string comparison) or the file has the key
//!   `org.apache.spark.legacyDateTime`, else CORRECTED;
//! - a file without a version: whatever the reader's configuration says;
//! - INT96 timestamps likewise, with "3.1.0" and
//!   `org.apache.spark.legacyINT96`;
//! - in LEGACY, values are rebased in the file's `org.apache.spark.timeZone`
//!   (the reader's session zone without it).
//!
//! A key whose value is unset counts as absent, as parquet-java's footer
//! map returns null for it.
//!
//! Invariants a rewrite keeps (checked by the caller with [`Rebase`]):
//! - every input of an output has the same datetime mode, and the same time
//!   zone key when that mode is LEGACY; the output carries the first input's
//!   Spark keys, so it has that mode too ([`KeyValueMerge`], which keeps
//!   the other keys only where every input has them alike);
//! - INT96 columns are written as INT64 microseconds, which Spark reads
//!   under the datetime mode rather than the INT96 one. Where an input's two
//!   modes may differ ([`Rebase::int96_reads_like_datetime`] is false), the
//!   rewrite is exact only for values from [`INT96_SAME_FROM_MICROS`] on,
//!   where no mode changes a value; an earlier one fails the unit. The INT96
//!   mode itself never has to agree between inputs: no output holds INT96.

use std::collections::BTreeMap;

/// The writing Spark's version.
pub const VERSION_KEY: &str = "org.apache.spark.version";
/// Dates and timestamps were rebased to the Julian calendar when written.
pub const LEGACY_DATETIME_KEY: &str = "org.apache.spark.legacyDateTime";
/// INT96 timestamps were rebased to the Julian calendar when written.
pub const LEGACY_INT96_KEY: &str = "org.apache.spark.legacyINT96";
/// The session time zone a LEGACY rebase was done in.
pub const TIME_ZONE_KEY: &str = "org.apache.spark.timeZone";
/// Spark's own schema of the file (JSON); when present, Spark infers the
/// file's schema from it rather than from the Parquet schema.
pub const ROW_METADATA_KEY: &str = "org.apache.spark.sql.parquet.row.metadata";

/// The keys deciding how Spark rebases a file's values.
const REBASE_KEYS: [&str; 4] = [VERSION_KEY, LEGACY_DATETIME_KEY, LEGACY_INT96_KEY, TIME_ZONE_KEY];

/// 1900-01-01T00:00:00Z in microseconds: Spark's `lastSwitchJulianTs`. No
/// rebase mode changes a timestamp from there on.
pub const INT96_SAME_FROM_MICROS: i64 = -2_208_988_800_000_000;

/// A footer's key-value pairs (or an Arrow schema's metadata); an unset
/// value is `None`.
pub type KeyValues = BTreeMap<String, Option<String>>;

/// How Spark reads a file's old dates and timestamps back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Rebased from the Julian calendar.
    Legacy,
    /// As stored.
    Corrected,
    /// The file does not say: the reader's configuration decides.
    ReaderConfig,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Legacy => "LEGACY (rebased from the Julian calendar)",
            Mode::Corrected => "CORRECTED (as stored)",
            Mode::ReaderConfig => "as the reader's configuration says (no Spark version in the footer)",
        })
    }
}

/// A file's rebase modes, as Spark derives them from its footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebase {
    pub datetime: Mode,
    pub int96: Mode,
    pub time_zone: Option<String>,
}

fn get<'a>(kv: &'a KeyValues, key: &str) -> Option<&'a str> {
    kv.get(key).and_then(|v| v.as_deref())
}

fn mode(kv: &KeyValues, min_version: &str, legacy_key: &str) -> Mode {
    // Scala's String comparison orders UTF-16 units; for the ASCII version
    // strings Spark writes that is byte order, as here.
    match get(kv, VERSION_KEY) {
        Some(v) if v < min_version || get(kv, legacy_key).is_some() => Mode::Legacy,
        Some(_) => Mode::Corrected,
        None => Mode::ReaderConfig,
    }
}

impl Rebase {
    /// The modes of a file whose footer holds `kv`.
    pub fn of(kv: &KeyValues) -> Rebase {
        Rebase {
            datetime: mode(kv, "3.0.0", LEGACY_DATETIME_KEY),
            int96: mode(kv, "3.1.0", LEGACY_INT96_KEY),
            time_zone: get(kv, TIME_ZONE_KEY).map(str::to_string),
        }
    }

    /// Whether Spark reads this file's dates and timestamps as it reads
    /// `other`'s: the same mode, and in LEGACY the same time zone.
    pub fn same_datetime(&self, other: &Rebase) -> bool {
        self.datetime == other.datetime && (self.datetime != Mode::Legacy || self.time_zone == other.time_zone)
    }

    /// Whether INT96 values rewritten as INT64 surely read as before: both
    /// modes are the same and known (two reader settings may differ).
    pub fn int96_reads_like_datetime(&self) -> bool {
        self.int96 == self.datetime && self.datetime != Mode::ReaderConfig
    }

    /// The datetime mode in words, with the time zone where it matters.
    pub fn describe(&self) -> String {
        match (&self.datetime, &self.time_zone) {
            (Mode::Legacy, Some(tz)) => format!("{} in time zone {tz}", self.datetime),
            (Mode::Legacy, None) => format!("{} in the reader's time zone", self.datetime),
            (m, _) => m.to_string(),
        }
    }
}

/// The key-value pairs an output carries, folded from its inputs' in their
/// order (one input's pairs at a time, so memory does not grow with the
/// number of inputs):
/// - Spark's rebase keys exactly as the first input has them (all inputs
///   read dates alike, checked separately);
/// - every other key that every input has with the same value. A key only
///   some inputs have, or with different values, is dropped: it may change
///   how a reader reads the values of the inputs that lack it (Hive's
///   `writer.time.zone`, an Avro schema), and Spark's own schema
///   ([`ROW_METADATA_KEY`]) of one file hides columns another added (Spark
///   then reads the Parquet schema, the union).
#[derive(Debug, Default)]
pub struct KeyValueMerge {
    first: Option<KeyValues>,
    inputs: usize,
    /// Key -> its value while inputs agree (`None` once they disagree), and
    /// how many inputs have it.
    others: BTreeMap<String, (Option<Option<String>>, usize)>,
}

impl KeyValueMerge {
    /// Folds in the next input's pairs.
    pub fn add(&mut self, kv: &KeyValues) {
        if self.first.is_none() {
            let rebase = REBASE_KEYS.iter().filter_map(|k| kv.get(*k).map(|v| (k.to_string(), v.clone()))).collect();
            self.first = Some(rebase);
        }
        self.inputs += 1;
        for (k, v) in kv {
            if REBASE_KEYS.contains(&k.as_str()) {
                continue;
            }
            let e = self.others.entry(k.clone()).or_insert((Some(v.clone()), 0));
            e.1 += 1;
            if e.0.as_ref().is_some_and(|seen| seen != v) {
                e.0 = None;
            }
        }
    }

    /// The output's pairs, and the keys dropped because inputs disagree on
    /// them or only some have them.
    pub fn finish(self) -> (KeyValues, Vec<String>) {
        let mut out = self.first.unwrap_or_default();
        let mut dropped = vec![];
        for (k, (v, n)) in self.others {
            match v {
                Some(v) if n == self.inputs => {
                    out.insert(k, v);
                }
                _ => dropped.push(k),
            }
        }
        (out, dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> KeyValues {
        pairs.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect()
    }

    #[test]
    fn modes_follow_sparks_get_rebase_spec() {
        let none = Rebase::of(&kv(&[]));
        assert_eq!((none.datetime, none.int96), (Mode::ReaderConfig, Mode::ReaderConfig));
        // A legacy marker without a version is ignored, as Spark does.
        assert_eq!(Rebase::of(&kv(&[(LEGACY_DATETIME_KEY, "")])).datetime, Mode::ReaderConfig);
        let spark24 = Rebase::of(&kv(&[(VERSION_KEY, "2.4.8")]));
        assert_eq!((spark24.datetime, spark24.int96), (Mode::Legacy, Mode::Legacy));
        let spark30 = Rebase::of(&kv(&[(VERSION_KEY, "3.0.3")]));
        assert_eq!((spark30.datetime, spark30.int96), (Mode::Corrected, Mode::Legacy));
        let spark35 = Rebase::of(&kv(&[(VERSION_KEY, "3.5.1")]));
        assert_eq!((spark35.datetime, spark35.int96), (Mode::Corrected, Mode::Corrected));
        assert!(spark35.int96_reads_like_datetime() && !spark30.int96_reads_like_datetime());
        assert!(!none.int96_reads_like_datetime(), "two reader settings may differ");
        let legacy = Rebase::of(&kv(&[(VERSION_KEY, "3.5.1"), (LEGACY_DATETIME_KEY, ""), (TIME_ZONE_KEY, "UTC")]));
        assert_eq!((legacy.datetime, legacy.int96), (Mode::Legacy, Mode::Corrected));
        assert_eq!(legacy.time_zone.as_deref(), Some("UTC"));
        // String comparison, as Scala's: "10.0.0" sorts before "3.0.0".
        assert_eq!(Rebase::of(&kv(&[(VERSION_KEY, "10.0.0")])).datetime, Mode::Legacy);
        // An unset value is absent (parquet-java's map holds null).
        let unset: KeyValues =
            [(VERSION_KEY.to_string(), Some("3.5.1".to_string())), (LEGACY_DATETIME_KEY.to_string(), None)].into();
        assert_eq!(Rebase::of(&unset).datetime, Mode::Corrected);
    }

    #[test]
    fn the_time_zone_matters_only_in_legacy_mode() {
        let a = Rebase::of(&kv(&[(VERSION_KEY, "3.5.1"), (TIME_ZONE_KEY, "UTC")]));
        let b = Rebase::of(&kv(&[(VERSION_KEY, "3.4.0"), (TIME_ZONE_KEY, "Asia/Tokyo")]));
        assert!(a.same_datetime(&b));
        let la = Rebase::of(&kv(&[(VERSION_KEY, "2.4.0"), (TIME_ZONE_KEY, "UTC")]));
        let lb = Rebase::of(&kv(&[(VERSION_KEY, "3.5.0"), (LEGACY_DATETIME_KEY, ""), (TIME_ZONE_KEY, "UTC")]));
        let lc = Rebase::of(&kv(&[(VERSION_KEY, "3.5.0"), (LEGACY_DATETIME_KEY, "")]));
        assert!(la.same_datetime(&lb) && !lb.same_datetime(&lc) && !a.same_datetime(&la));
    }

    #[test]
    fn outputs_keep_the_first_inputs_spark_keys_and_the_keys_every_input_shares() {
        let a = kv(&[(VERSION_KEY, "3.4.0"), (ROW_METADATA_KEY, "old"), ("owner", "x"), ("pandas", "1")]);
        let b = kv(&[(VERSION_KEY, "3.5.1"), (ROW_METADATA_KEY, "new"), ("owner", "x"), ("pandas", "2")]);
        let merge = |inputs: &[&KeyValues]| {
            let mut m = KeyValueMerge::default();
            for kv in inputs {
                m.add(kv);
            }
            m.finish()
        };
        let (out, dropped) = merge(&[&a, &b]);
        assert_eq!(out, kv(&[(VERSION_KEY, "3.4.0"), ("owner", "x")]));
        assert_eq!(dropped, vec![ROW_METADATA_KEY.to_string(), "pandas".to_string()]);
        let (out, _) = merge(&[&a, &a]);
        assert_eq!(out, a, "inputs that agree keep everything");
        // A key only some inputs have is dropped: it may say how to read
        // values the other inputs wrote otherwise.
        let c = kv(&[("writer.time.zone", "America/New_York")]);
        let (out, dropped) = merge(&[&kv(&[]), &c]);
        assert!(out.is_empty() && dropped == vec!["writer.time.zone".to_string()]);
    }
}
