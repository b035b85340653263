#!/usr/bin/env python3
"""Regenerates proto/k8s/*.proto: the Kubernetes protobuf messages the server speaks.

Sources (both Apache-2.0, both generated from kubernetes/api and kubernetes/apimachinery):
  * k8s-pb (crates.io, kube-rs): prost structs carrying each field's wire type, tag and
    cardinality, and the message types it refers to;
  * k8s-openapi (crates.io, features v1_36): each field's JSON name (its serde field table),
    which is also the field's name in upstream's generated.proto.
A k8s-pb field with no JSON counterpart in k8s-openapi's struct is a Go struct embedded with
`json:",inline"` (Volume.volumeSource, Probe.handler, ...): it is listed in inline.txt, and
the converter flattens it into its parent's JSON.

Usage: python3 proto/generate.py K8S_PB_SRC K8S_OPENAPI_SRC/v1_36   (from crates/apiserver)
"""
import os
import re
import sys

PACKAGES = [
    "api/core/v1",
    "api/events/v1",
    "api/coordination/v1",
    "api/authentication/v1",
    "api/authorization/v1",
    "apimachinery/pkg/apis/meta/v1",
    "apimachinery/pkg/runtime",
    "apimachinery/pkg/runtime/schema",
    "apimachinery/pkg/api/resource",
    "apimachinery/pkg/util/intstr",
]

STRUCT_RE = re.compile(r"^pub struct (\w+) \{$")
ATTR_RE = re.compile(r"#\[prost\((.*)\)\]")
FIELD_RE = re.compile(r"^\s*pub (?:r#)?(\w+): (.*),$")


def proto_package(mod):
    return "k8s.io." + mod.replace("/", ".")


def norm(name):
    return name.removeprefix("r#").rstrip("_")


def lower_camel(snake):
    parts = snake.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def parse_pb(path, mod):
    """[(struct, [(rust_field, attr, rust_type)])]"""
    structs, cur, attr, pending = [], None, None, ""
    for line in open(path):
        line = line.rstrip("\n")
        # rustfmt wraps long field types over several lines: join them.
        if pending or (attr is not None and line.startswith("    pub ") and not line.endswith(",")):
            pending += " " + line.strip() if pending else line
            if pending.count("<") > pending.count(">") or not pending.endswith(","):
                continue
            line, pending = pending.replace(", >", ">").replace(",>", ">"), ""
        m = STRUCT_RE.match(line)
        if m:
            cur = (m.group(1), [])
            structs.append(cur)
            continue
        if cur is None:
            continue
        if line == "}":
            cur = None
            continue
        m = ATTR_RE.search(line)
        if m:
            attr = m.group(1)
            continue
        m = FIELD_RE.match(line)
        if m and attr is not None:
            cur[1].append((norm(m.group(1)), attr, m.group(2)))
            attr = None
    return structs


def resolve(rust_type, mod):
    """The proto full name of the message type at the end of a Rust type."""
    inner = re.sub(r"^::core::option::Option<|^::prost::alloc::vec::Vec<", "", rust_type)
    if "BTreeMap<" in inner:
        inner = inner.split(",", 1)[1].strip()
    inner = inner.rstrip(">").strip()
    segs = inner.split("::")
    here = mod.split("/")
    n = 0
    while segs and segs[0] == "super":
        segs.pop(0)
        n += 1
    base = here[: len(here) - n] if n else here
    if n == 0 and len(segs) > 1:
        base = []
    return proto_package("/".join(base + segs[:-1])) + "." + segs[-1], "/".join(base + segs[:-1])


def openapi_fields(openapi_root, mod):
    """{lowercased struct name: (struct name, {rust field: json name})}"""
    d = os.path.join(openapi_root, mod)
    out = {}
    if not os.path.isdir(d):
        return out
    for f in os.listdir(d):
        if not f.endswith(".rs") or f == "mod.rs":
            continue
        text = open(os.path.join(d, f)).read()
        m = re.search(r"^pub struct (\w+)", text, re.M)
        if not m:
            continue
        fields = {norm(r): j for j, r in re.findall(r'"([^"]+)" => Field::Key_(\w+),', text)}
        out[m.group(1).lower()] = (m.group(1), fields)
    return out


SCALARS = {"bool": "bool", "int32": "int32", "int64": "int64", "string": "string", "bytes": "bytes"}


def main():
    pb_root, openapi_root = sys.argv[1], sys.argv[2]
    os.makedirs("proto/k8s", exist_ok=True)
    inline, unmatched, missing, guessed = [], [], [], []
    pb_fields, renamed = {}, {}
    for mod in PACKAGES:
        path = os.path.join(pb_root, mod, "mod.rs")
        if os.path.exists(path):
            api = openapi_fields(openapi_root, mod)
            for name, fields in parse_pb(path, mod):
                pb_fields[proto_package(mod) + "." + name] = [f[0] for f in fields]
                # k8s-pb spells acronyms as words (HttpHeader); upstream's name is HTTPHeader.
                oname = api.get(name.lower(), (name, None))[0]
                renamed[proto_package(mod) + "." + name] = proto_package(mod) + "." + oname
    for mod in PACKAGES:
        path = os.path.join(pb_root, mod, "mod.rs")
        if not os.path.exists(path):
            continue
        structs = parse_pb(path, mod)
        api = openapi_fields(openapi_root, mod)
        # Messages k8s-openapi flattens away (VolumeSource, ProbeHandler) take their names from
        # the package's other structs (Volume.downwardAPI).
        package_names = {}
        for _, (_, fields) in api.items():
            for r, j in fields.items():
                package_names.setdefault(r.replace("_", ""), j)
        imports = set()
        body = []
        for name, fields in structs:
            oname, jnames = api.get(name.lower(), (name, None))
            loose = {r.replace("_", ""): j for r, j in (jnames or {}).items()}
            seen = set()
            body.append(f"message {oname} {{")
            for rust, attr, rtype in fields:
                tag = re.search(r'tag = "(\d+)"', attr).group(1)
                kind = attr.split(",")[0].strip()
                jname = (jnames or {}).get(rust) or loose.get(rust.replace("_", ""))
                if jnames:
                    seen.add(rust.replace("_", ""))
                if jname is None and not jnames:
                    jname = package_names.get(rust.replace("_", ""))
                    if jname is None:
                        guessed.append(f"{oname}.{lower_camel(rust)}")
                if jname is None:
                    jname = lower_camel(rust)
                    if jnames:
                        embedded = pb_fields.get(resolve(rtype, mod)[0], []) if kind == "message" else []
                        if embedded and "repeated" not in attr and all(
                            f.replace("_", "") in loose for f in embedded
                        ):
                            inline.append(f"{proto_package(mod)}.{oname}.{jname}")
                        else:
                            unmatched.append(f"{oname}.{jname}")
                if kind.startswith("btree_map"):
                    k, v = re.search(r'btree_map = "(\w+), (\w+)"', attr).groups()
                    if v == "message":
                        full, m2 = resolve(rtype, mod)
                        if m2 != mod:
                            imports.add(m2)
                        v = "." + renamed.get(full, full)
                    body.append(f"  map<{k}, {SCALARS.get(v, v)}> {jname} = {tag};")
                    continue
                label = "repeated" if "repeated" in attr else "optional"
                if kind == "message":
                    full, m2 = resolve(rtype, mod)
                    if m2 != mod:
                        imports.add(m2)
                    typ = "." + renamed.get(full, full)
                else:
                    typ = SCALARS[kind.split(" ")[0]]
                body.append(f"  {label} {typ} {jname} = {tag};")
            body.append("}")
            body.append("")
            for r, j in loose.items():
                if r not in seen:
                    missing.append(f"{oname}.{j}")
        with open(f"proto/k8s/{mod.replace('/', '.')}.proto", "w") as out:
            out.write("// Generated by proto/generate.py from k8s-pb 0.9.0 (wire types, tags) and\n")
            out.write("// k8s-openapi 0.29.0 v1_36 (field names). Do not edit.\n")
            out.write('syntax = "proto2";\n\n')
            out.write(f"package {proto_package(mod)};\n\n")
            for i in sorted(imports):
                out.write(f'import "{i.replace("/", ".")}.proto";\n')
            out.write("\n" + "\n".join(body))
    with open("proto/inline.txt", "w") as out:
        out.write("# Fields Go embeds with json:\",inline\" (generated by proto/generate.py)\n")
        out.write("\n".join(sorted(set(inline))) + "\n")
    print("inline:", len(inline), file=sys.stderr)
    print("in k8s-openapi v1_36, not in k8s-pb:", missing, file=sys.stderr)
    print("named by lowerCamel (no k8s-openapi struct):", guessed, file=sys.stderr)
    print("unmatched (no JSON name in k8s-openapi v1_36):", unmatched, file=sys.stderr)


main()
