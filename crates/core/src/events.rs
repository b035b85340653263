//! [`EventType`]: the type of a Kubernetes Event the node crates emit.

/// Kubernetes event type (`Event.type`). The one event-type enum of the node crates: the
/// volume manager and the pod worker emit it, the agent's event recorder keys on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// The `Event.type` text: `Normal` or `Warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_are_spelled_as_the_api_spells_them() {
        assert_eq!(EventType::Normal.as_str(), "Normal");
        assert_eq!(EventType::Warning.as_str(), "Warning");
    }
}
