//! [`resolve_container_port`]: a handler's `port` (a number, or the name of one of the
//! container's ports) as the kubelet's prober resolves it.

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::error::PortError;

/// The port `port` names for `container`: a number as it is; a string as the `containerPort`
/// of the container's port of that name, else as a number written as text. The result must
/// be in 1..=65535.
///
/// # Errors
/// [`PortError::NotFound`] for a name the container does not have (and that is no number),
/// [`PortError::Invalid`] for a number out of range.
pub fn resolve_container_port(port: &IntOrString, container: &Container) -> Result<u16, PortError> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => {
            let named = container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| i64::from(p.container_port));
            match named {
                Some(n) => n,
                None => name
                    .parse::<i64>()
                    .map_err(|_| PortError::NotFound { name: name.clone() })?,
            }
        }
    };
    u16::try_from(number)
        .ok()
        .filter(|&p| p > 0)
        .ok_or(PortError::Invalid { port: number })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerPort;

    use super::*;

    fn container() -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("web".into()),
                container_port: 8080,
                ..ContainerPort::default()
            }]),
            ..Container::default()
        }
    }

    #[test]
    fn a_port_is_a_number_a_port_name_or_a_number_written_as_text() {
        let c = container();
        let port = |p: IntOrString| resolve_container_port(&p, &c);
        assert_eq!(port(IntOrString::Int(80)).ok(), Some(80));
        assert_eq!(port(IntOrString::String("web".into())).ok(), Some(8080));
        assert_eq!(port(IntOrString::String("9090".into())).ok(), Some(9090));
        let missing = port(IntOrString::String("metrics".into()));
        assert_eq!(
            missing.map_err(|e| e.to_string()),
            Err("strconv.Atoi: parsing \"metrics\": invalid syntax".to_owned())
        );
        for bad in [0, -1, 65536] {
            assert_eq!(
                port(IntOrString::Int(bad)).map_err(|e| e.to_string()),
                Err(format!("invalid port number: {bad}"))
            );
        }
    }
}
