//! A command in a running container (`kubectl exec`): `nodelet-container-exec PID SPEC.json --
//! COMMAND [ARG...]` joins the namespaces of the container's process `PID`, becomes the user
//! `SPEC.json` names and executes the command with the container's environment.

fn main() {
    let code = nodelet_runtime::sandbox::exec_main(std::env::args_os().skip(1));
    std::process::exit(code);
}
