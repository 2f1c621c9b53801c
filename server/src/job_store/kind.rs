//! The kinds of job the one job store carries (SPEC §10). Claims, leases, fencing, stall
//! detection, retries, cancellation, retention, deployment pinning and the audit trail are the
//! same for every kind; a kind brings its payload, its phases, what its checkpoints hold and its
//! artifact.

/// What a job does; stored in `jobs.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobKind {
    /// Produces a CSV file of a report (SPEC §5).
    Export,
    /// Validates a CSV file and applies its rows to a dataset (SPEC §10).
    Import,
}

impl JobKind {
    /// Every kind.
    pub const ALL: [JobKind; 2] = [JobKind::Export, JobKind::Import];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Export => "export",
            JobKind::Import => "import",
        }
    }

    /// The kind of a stored name.
    pub fn parse(name: &str) -> Option<JobKind> {
        JobKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The prefix of its jobs' ids (`exp_…`, `imp_…`).
    pub fn id_prefix(self) -> &'static str {
        match self {
            JobKind::Export => "exp_",
            JobKind::Import => "imp_",
        }
    }

    /// The API's collection of its jobs: `/api/{collection}/{id}` is a job's status.
    pub fn api_collection(self) -> &'static str {
        match self {
            JobKind::Export => "exports",
            JobKind::Import => "imports",
        }
    }

    /// What a notification of one of its jobs names what it read or wrote (contract §15):
    /// `report` or `dataset`.
    pub fn subject_field(self) -> &'static str {
        match self {
            JobKind::Export => "report",
            JobKind::Import => "dataset",
        }
    }

    /// A new id for a job of this kind: the prefix and a time-ordered UUID in 32 hex digits.
    pub fn new_id(self) -> String {
        format!("{}{}", self.id_prefix(), uuid::Uuid::now_v7().simple())
    }

    /// The kind whose id this is, if the id is well formed: a prefix and 32 lower-case hex digits.
    pub fn of_id(id: &str) -> Option<JobKind> {
        JobKind::ALL.into_iter().find(|k| is_prefixed_id(id, k.id_prefix()))
    }

    /// Whether every ending of its jobs leaves a report, not only the release (an import's
    /// failed or cancelled report lists what was and was not applied): the worker writes it
    /// after the ending, and the janitor for any ending no worker of the job saw.
    pub fn reports_every_ending(self) -> bool {
        match self {
            JobKind::Export => false,
            JobKind::Import => true,
        }
    }

    /// Whether a redrive keeps its committed steps: an import's batches are applied rows, kept
    /// (with its plan) so a redrive goes on after the last; an export's parts are only files,
    /// read again from a new snapshot.
    pub fn redrive_keeps_committed_steps(self) -> bool {
        match self {
            JobKind::Export => false,
            JobKind::Import => true,
        }
    }

    /// The root folder of its published files in a deployment's store.
    pub fn artifact_root(self) -> &'static str {
        match self {
            JobKind::Export => "exports",
            JobKind::Import => "imports",
        }
    }
}

/// Whether `id` is `prefix` and 32 lower-case hex digits (a UUID in its simple form): the shape
/// of every id exportd gives out (`exp_`, `imp_`, `upl_`).
pub fn is_prefixed_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_from_its_name_and_from_its_ids() {
        for kind in JobKind::ALL {
            assert_eq!(JobKind::parse(kind.as_str()), Some(kind));
            assert_eq!(JobKind::of_id(&kind.new_id()), Some(kind));
        }
        assert_eq!(JobKind::parse("Export"), None);
        for bad in ["exp_", "imp_01A242DD4DE1737AB303DB50CC1DFDED", "job_01a242dd4de1737ab303db50cc1dfded", "imp_01a242dd4de1737ab303db50cc1dfde"] {
            assert_eq!(JobKind::of_id(bad), None, "{bad:?}");
        }
    }
}
