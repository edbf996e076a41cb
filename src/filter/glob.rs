//! Topic globs for `topic==` values (an eventgate extension).
//!
//! `*` matches any run of characters inside one `/`-separated component and a
//! component that is exactly `**` matches zero or more whole components.
//! Valid containerd topics never contain `*`, so a pattern without `*` is
//! never compiled into a glob and keeps plain string equality.

#[derive(Clone, Debug, PartialEq, Eq)]
enum Component {
    /// `**`: any number of components, including none.
    AnyDepth,
    /// A component pattern in which `*` matches within the component.
    Pattern(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TopicGlob {
    components: Vec<Component>,
}

impl TopicGlob {
    pub(super) fn new(pattern: &str) -> Self {
        let components = pattern
            .split('/')
            .map(|c| match c {
                "**" => Component::AnyDepth,
                _ => Component::Pattern(c.to_owned()),
            })
            .collect();
        TopicGlob { components }
    }

    /// Matches without allocating. The component sequence is walked with
    /// the classic greedy wildcard algorithm, where `**` plays the star and
    /// backtracking only ever returns to the most recent `**`; that is
    /// enough because each `**` can absorb whatever an earlier one would.
    pub(super) fn matches(&self, topic: &str) -> bool {
        // Components are addressed by their start offset; `end` is one past
        // the final component, so an empty topic still has one (empty)
        // component.
        let end = topic.len() + 1;
        let (mut p, mut t) = (0, 0);
        let mut backtrack: Option<(usize, usize)> = None;
        while t < end {
            match self.components.get(p) {
                Some(Component::AnyDepth) => {
                    backtrack = Some((p + 1, t));
                    p += 1;
                    continue;
                }
                Some(Component::Pattern(pat)) if wildcard(pat, component_at(topic, t)) => {
                    p += 1;
                    t = next_component(topic, t);
                    continue;
                }
                _ => {}
            }
            let Some((resume_p, absorbed_to)) = backtrack else {
                return false;
            };
            let t_next = next_component(topic, absorbed_to);
            backtrack = Some((resume_p, t_next));
            p = resume_p;
            t = t_next;
        }
        self.components[p..]
            .iter()
            .all(|c| *c == Component::AnyDepth)
    }
}

fn component_at(topic: &str, start: usize) -> &str {
    let rest = &topic[start..];
    &rest[..rest.find('/').unwrap_or(rest.len())]
}

fn next_component(topic: &str, start: usize) -> usize {
    match topic[start..].find('/') {
        Some(i) => start + i + 1,
        None => topic.len() + 1,
    }
}

/// `*`-only wildcard match within one component. Working on bytes is sound:
/// a UTF-8 literal can only match at a character boundary of UTF-8 text.
fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut si) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while si < s.len() {
        if p.get(pi) == Some(&b'*') {
            backtrack = Some((pi + 1, si));
            pi += 1;
        } else if p.get(pi) == Some(&s[si]) {
            pi += 1;
            si += 1;
        } else if let Some((resume_p, absorbed_to)) = backtrack {
            backtrack = Some((resume_p, absorbed_to + 1));
            pi = resume_p;
            si = absorbed_to + 1;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}
