//! Each primitive's words, for the progress line, the verdict line and the report: a mutex
//! has holds, an election terms, a read-write lock writers and readers (whose checked reads
//! are not writes), a semaphore permits, a multi-lock holds of each of its locks.

use super::args::Primitive;
use super::check::Tally;

/// What a verify run contended for: the primitive, and a semaphore's N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contended {
    /// The primitive.
    pub primitive: Primitive,
    /// The semaphore's number of permits (unused by the others).
    pub permits: u32,
}

impl Contended {
    /// The primitive and N, for a title: "a semaphore of 2 permits".
    pub fn title(self) -> String {
        match self.primitive {
            Primitive::Mutex => "a mutex".to_owned(),
            Primitive::Election => "a leader election".to_owned(),
            Primitive::Rwlock => "a read-write lock".to_owned(),
            Primitive::Semaphore => format!("a semaphore of {} permits", self.permits),
            Primitive::Multi => "a multi-lock".to_owned(),
        }
    }

    /// What a hold is called, in the plural.
    pub fn holds(self) -> &'static str {
        match self.primitive {
            Primitive::Mutex => "holds",
            Primitive::Election => "terms",
            Primitive::Rwlock => "holds (readers and writers)",
            Primitive::Semaphore => "permits held",
            Primitive::Multi => "lock holds",
        }
    }

    /// What check (a) looks at.
    pub fn overlaps(self) -> &'static str {
        match self.primitive {
            Primitive::Mutex => "overlapping pairs of holds",
            Primitive::Election => "overlapping pairs of terms",
            Primitive::Rwlock => "overlapping pairs of holds with a writer",
            Primitive::Semaphore => "crowds: more permit holders at once than permits",
            Primitive::Multi => "overlapping pairs of holds, lock by lock",
        }
    }

    /// What check (f) waits for after a fault.
    pub fn taken(self) -> &'static str {
        match self.primitive {
            Primitive::Election => "a leader elected",
            Primitive::Semaphore => "a permit taken",
            Primitive::Multi => "the locks taken",
            _ => "the lock taken",
        }
    }

    /// Whose writes the write counts are.
    pub fn writes(self) -> &'static str {
        match self.primitive {
            Primitive::Mutex => "holders' writes",
            Primitive::Election => "leaders' writes",
            Primitive::Rwlock => "writers' writes",
            Primitive::Semaphore => "permit holders' writes",
            Primitive::Multi => "writes (one per lock)",
        }
    }

    /// A holding's role and token (`locks`: the lock's names by part), as plain text:
    /// "reader, token 7", "lock orders-1, token 9".
    pub fn holding(self, part: u8, token: u64, locks: &[String]) -> String {
        match (self.primitive, part) {
            (Primitive::Election, _) => format!("leader, term {token}"),
            (Primitive::Rwlock, 1) => format!("reader, token {token}"),
            (Primitive::Rwlock, _) => format!("writer, token {token}"),
            (Primitive::Semaphore, _) => format!("permit, token {token}"),
            (Primitive::Multi, p) => {
                let name = locks.get(usize::from(p)).map_or("?", String::as_str);
                format!("lock {name}, token {token}")
            }
            (Primitive::Mutex, _) => format!("token {token}"),
        }
    }

    /// The counts of `t`, worded for this primitive: the progress line's and the verdict's.
    pub fn counts(self, t: Tally) -> String {
        let reads = match self.primitive {
            Primitive::Rwlock => format!(
                ", checked reads {} standing, {} refused",
                t.reads.0, t.reads.1
            ),
            _ => String::new(),
        };
        let writes = self.writes();
        format!(
            "{} {}, {writes} {} taken, {} refused{reads}",
            t.holds,
            self.holds(),
            t.writes.0,
            t.writes.1
        )
    }
}
