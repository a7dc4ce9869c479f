//! Which policy owns which table: every policy's patterns, indexed by
//! their segments, matched against the tables found on the data backend.
//!
//! The index keeps a policy file of tens of thousands of patterns from
//! costing patterns × tables glob matches per pass: a literal segment is a
//! hash lookup, and a wildcard segment is matched once per distinct text
//! (`*` of every pattern that starts with `*/` is one match). Finding a
//! table's owner costs its matching patterns plus one match per distinct
//! wildcard segment on the path, not one per pattern.
//!
//! The owner of a table is the most specific matching pattern
//! ([`super::spec::specificity`]), a tie going to the policy whose name
//! sorts first (see the module doc of [`super`]).

use std::collections::HashMap;
use std::sync::Arc;

use layouts::policies::PolicyDefinition;

use super::spec;

/// One segment level of the index: children by literal segment, and by
/// wildcard segment (each distinct text once).
#[derive(Debug)]
struct Level<T> {
    literal: HashMap<String, T>,
    globs: Vec<(String, T)>,
}

impl<T> Default for Level<T> {
    fn default() -> Self {
        Level { literal: HashMap::new(), globs: Vec::new() }
    }
}

impl<T: Default> Level<T> {
    fn child(&mut self, seg: &str) -> &mut T {
        if seg.contains(['*', '?']) {
            let i = match self.globs.iter().position(|(g, _)| g == seg) {
                Some(i) => i,
                None => {
                    self.globs.push((seg.to_string(), T::default()));
                    self.globs.len() - 1
                }
            };
            &mut self.globs[i].1
        } else {
            self.literal.entry(seg.to_string()).or_default()
        }
    }
}

impl<T> Level<T> {
    /// The children whose segment matches `name`.
    fn matching<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a T> + 'a {
        self.literal.get(name).into_iter().chain(self.globs.iter().filter(|(g, _)| spec::glob(g, name)).map(|(_, t)| t))
    }
}

/// A pattern and the policy it belongs to.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub policy: Arc<PolicyDefinition>,
    pub paused: bool,
    pub text: String,
}

/// Every policy's patterns, indexed.
#[derive(Debug, Default)]
pub struct Patterns {
    all: Vec<Pattern>,
    index: Level<Level<Level<Vec<usize>>>>,
}

impl Patterns {
    /// Indexes the patterns of `rows` (each policy's once, even if it
    /// names one twice).
    pub fn new(rows: &[super::PolicyRow]) -> Patterns {
        let mut p = Patterns::default();
        for r in rows {
            let policy = Arc::new(r.definition.clone());
            for text in &r.definition.tables {
                let segs: Vec<&str> = text.split('/').collect();
                let [db, schema, table] = segs[..] else { continue };
                let slot = p.index.child(db).child(schema).child(table);
                if slot.iter().any(|i| p.all[*i].text == *text && Arc::ptr_eq(&p.all[*i].policy, &policy)) {
                    continue;
                }
                slot.push(p.all.len());
                p.all.push(Pattern { policy: policy.clone(), paused: r.paused, text: text.clone() });
            }
        }
        p
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Does some pattern match a table in database `db`?
    pub fn any_in_db(&self, db: &str) -> bool {
        self.index.matching(db).next().is_some()
    }

    /// Does some pattern match a table in `db/schema`?
    pub fn any_in_schema(&self, db: &str, schema: &str) -> bool {
        self.index.matching(db).any(|s| s.matching(schema).next().is_some())
    }

    /// The pattern that owns `db/schema/table`, if any matches.
    pub fn owner(&self, db: &str, schema: &str, table: &str) -> Option<&Pattern> {
        let mut best: Option<&Pattern> = None;
        for s in self.index.matching(db) {
            for t in s.matching(schema) {
                for ids in t.matching(table) {
                    for p in ids.iter().map(|i| &self.all[*i]) {
                        let better = best.is_none_or(|b| {
                            (spec::specificity(&p.text), std::cmp::Reverse(&p.policy.name))
                                > (spec::specificity(&b.text), std::cmp::Reverse(&b.policy.name))
                        });
                        if better {
                            best = Some(p);
                        }
                    }
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyRow;

    fn row(name: &str, tables: &[&str]) -> PolicyRow {
        let text = format!(
            "name = \"{name}\"\ntables = [{}]\nmin-small-files = 4\n",
            tables.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ")
        );
        PolicyRow { definition: spec::parse("p.toml", &text).unwrap(), paused: false }
    }

    #[test]
    fn the_index_finds_the_same_owner_as_matching_every_pattern() {
        let rows = vec![
            row("a", &["db/public/*", "*/*/*", "db/p?blic/orders"]),
            row("b", &["db/public/ord*", "db/*/events", "x/y/z"]),
            row("c", &["db/public/orders", "*/public/*"]),
        ];
        let idx = Patterns::new(&rows);
        let names = ["db", "x", "public", "y", "orders", "events", "z", "other", "pblic", "ord"];
        for db in names {
            for schema in names {
                for table in names {
                    // What matching every pattern in turn gives.
                    let mut want: Option<(&str, &str)> = None;
                    for r in &rows {
                        for p in &r.definition.tables {
                            if !spec::matches(p, db, schema, table) {
                                continue;
                            }
                            let better = want.is_none_or(|(bn, bp)| {
                                (spec::specificity(p), std::cmp::Reverse(r.definition.name.as_str()))
                                    > (spec::specificity(bp), std::cmp::Reverse(bn))
                            });
                            if better {
                                want = Some((r.definition.name.as_str(), p.as_str()));
                            }
                        }
                    }
                    let got = idx.owner(db, schema, table).map(|p| (p.policy.name.as_str(), p.text.as_str()));
                    assert_eq!(got, want, "{db}/{schema}/{table}");
                    assert_eq!(
                        idx.any_in_schema(db, schema),
                        rows.iter().any(|r| r.definition.tables.iter().any(|p| {
                            let s: Vec<&str> = p.split('/').collect();
                            spec::glob(s[0], db) && spec::glob(s[1], schema)
                        }))
                    );
                }
            }
        }
    }

    /// A policy of 30,001 patterns over 10,000 tables: one owner lookup
    /// per table, each a few hash lookups (it was 300 million glob
    /// matches, 28.8 s of CPU, per pass).
    #[test]
    fn thirty_thousand_patterns_over_ten_thousand_tables_cost_lookups_not_their_product() {
        let mut tables: Vec<String> = (0..30_000).map(|i| format!("db/s{}/t{i:05}", i % 10)).collect();
        tables.push("db/*/t*".into());
        let text = format!(
            "name = \"many\"\ntables = [{}]\nmin-small-files = 4\n",
            tables.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ")
        );
        let rows = vec![PolicyRow { definition: spec::parse("p.toml", &text).unwrap(), paused: false }];
        // A test measures its own CPU time: real time, on purpose.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        let idx = Patterns::new(&rows);
        let mut literal_won = 0;
        for i in 0..10_000 {
            let p = idx.owner("db", &format!("s{}", i % 10), &format!("t{:05}", i * 3)).expect("matched");
            literal_won += usize::from(p.text != "db/*/t*");
        }
        // `t{i*3}` is named in schema `s{i*3 % 10}`, which is `s{i % 10}`
        // when i is a multiple of 5.
        assert_eq!(literal_won, 2_000);
        let spent = started.elapsed();
        eprintln!("30,001 patterns indexed and 10,000 owners found in {spent:?}");
        assert!(spent < std::time::Duration::from_secs(5), "{spent:?}");
    }
}
