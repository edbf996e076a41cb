//! What compiling one filter's `~=` expressions may cost. A filter comes from a
//! client (Subscribe), and a short pattern can compile to megabytes (`\pL{200}` is
//! nine bytes): the regex crate's own limits (10 MiB per expression, plus up to
//! 2 MiB of matching cache) multiplied by every expression of every filter of every
//! subscriber would let one client take the gateway's memory, and the time to
//! compile it. A budget bounds all expressions of one filter together.

/// The regex crate's default compiled-size limit for one expression.
const CRATE_SIZE_LIMIT: usize = 10 << 20;
/// The regex crate's default lazy DFA cache for one expression.
const CRATE_CACHE: usize = 2 << 20;

/// Limits for compiling the `~=` expressions of one filter (all of its strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RegexBudget {
    /// What all expressions together may take: each one's compiled size plus the
    /// matching cache it may grow to. `None`: no total; each expression alone is
    /// held to the regex crate's default limit (for trusted filters: configuration,
    /// queries).
    pub total: Option<usize>,
    /// The lazy DFA cache each expression may grow to while matching. A smaller one
    /// costs speed on expressions that need more states, never correctness.
    pub cache: usize,
}

impl RegexBudget {
    /// Per-expression cache under a total budget: enough for the lazy DFA of
    /// ordinary patterns on topic-length text.
    pub(crate) const CACHE: usize = 64 << 10;

    /// The regex crate's own limits, per expression, and no total.
    pub(crate) const UNLIMITED: RegexBudget = RegexBudget {
        total: None,
        cache: CRATE_CACHE,
    };

    /// At most `bytes` for all expressions together, [`Self::CACHE`] each for matching.
    pub(crate) fn total(bytes: usize) -> Self {
        RegexBudget {
            total: Some(bytes),
            cache: Self::CACHE,
        }
    }
}

impl Default for RegexBudget {
    fn default() -> Self {
        Self::UNLIMITED
    }
}

/// What is left of a [`RegexBudget`] while one filter is compiled.
pub(super) struct Budget {
    limits: RegexBudget,
    left: usize,
}

impl Budget {
    pub(super) fn new(limits: RegexBudget) -> Self {
        Self {
            limits,
            left: limits.total.unwrap_or(usize::MAX),
        }
    }

    pub(super) fn limits(&self) -> RegexBudget {
        self.limits
    }

    pub(super) fn is_limited(&self) -> bool {
        self.limits.total.is_some()
    }

    /// The compiled-size limit for the next expression: what is left once its cache
    /// is set aside. `None` when not even that fits. Building stops as soon as the
    /// limit is passed, so an expression over budget costs little time too.
    pub(super) fn size_limit(&self) -> Option<usize> {
        if !self.is_limited() {
            return Some(CRATE_SIZE_LIMIT);
        }
        self.left
            .checked_sub(self.limits.cache)
            .filter(|size| *size > 0)
    }

    /// Takes an expression's compiled size and its cache from what is left.
    pub(super) fn charge(&mut self, compiled: usize) -> Result<(), super::goregex::CompileError> {
        if !self.is_limited() {
            return Ok(());
        }
        let cost = compiled.saturating_add(self.limits.cache);
        self.left = self
            .left
            .checked_sub(cost)
            .ok_or(super::goregex::CompileError::OverBudget)?;
        Ok(())
    }
}
