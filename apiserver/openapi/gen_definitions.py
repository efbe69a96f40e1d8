#!/usr/bin/env python3
"""Writes definitions.json (see README.md) from upstream's swagger 2.0 document.

Usage: python3 gen_definitions.py <swagger.json of a Kubernetes release> <release, e.g. v1.33.1> \
    > definitions.json

Keeps the definitions reachable from every kind of the group-versions listed in SERVED (plus
the meta types every group-version document carries) and the query parameters of the
operations we describe, taken from upstream's apps/v1 Deployment operations. Definitions are
copied unmodified; one definition per line keeps diffs between releases readable.
"""

import json
import re
import sys

# The group-versions the catalog (src/catalog.rs) serves. Add one here, then regenerate.
SERVED = [
    ("", "v1"),
    ("apps", "v1"),
    ("batch", "v1"),
    ("coordination.k8s.io", "v1"),
    ("discovery.k8s.io", "v1"),
    ("events.k8s.io", "v1"),
    ("rbac.authorization.k8s.io", "v1"),
    ("networking.k8s.io", "v1"),
    ("policy", "v1"),
    ("storage.k8s.io", "v1"),
    ("scheduling.k8s.io", "v1"),
    ("authorization.k8s.io", "v1"),
    ("authentication.k8s.io", "v1"),
    ("certificates.k8s.io", "v1"),
]

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
EXTRA = [
    META + "APIResourceList",
    META + "DeleteOptions",
    META + "Patch",
    META + "Status",
    META + "WatchEvent",
    "io.k8s.api.autoscaling.v1.Scale",
]

# Older group-versions we serve that the release no longer describes: (group, old version,
# kinds), each kind's definition made from the preferred version's with the version changed
# (upstream's fields were the same when it last served them).
TWINS = [
    ("authentication.k8s.io", "v1beta1", "v1", ["SelfSubjectReview", "SelfSubjectReviewStatus"]),
]


def add_twins(definitions, keep):
    """Adds the TWINS definitions to `definitions` and `keep`."""
    for group, old, new, kinds in TWINS:
        package = "io.k8s.api.%s." % group.split(".")[0]
        for kind in kinds:
            text = json.dumps(definitions[package + new + "." + kind])
            for other in kinds:  # refer to the twins, not the preferred version's kinds
                text = text.replace('/%s%s.%s"' % (package, new, other), '/%s%s.%s"' % (package, old, other))
            twin = json.loads(text)
            for gvk in twin.get("x-kubernetes-group-version-kind", []):
                gvk["version"] = old
            definitions[package + old + "." + kind] = twin
            keep.add(package + old + "." + kind)


# Which upstream operation supplies the query parameters of each of ours.
OPERATIONS = {
    "list": ("/apis/apps/v1/namespaces/{namespace}/deployments", "get"),
    "create": ("/apis/apps/v1/namespaces/{namespace}/deployments", "post"),
    "deletecollection": ("/apis/apps/v1/namespaces/{namespace}/deployments", "delete"),
    "read": ("/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "get"),
    "replace": ("/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "put"),
    "patch": ("/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "patch"),
    "delete": ("/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "delete"),
}


def main():
    swagger = json.load(open(sys.argv[1]))
    definitions = swagger["definitions"]
    shared = swagger["parameters"]

    def resolve(param):
        if "$ref" in param:
            return shared[param["$ref"].rsplit("/", 1)[1]]
        return param

    roots = [
        name
        for name, schema in definitions.items()
        if not name.startswith("io.k8s.apimachinery.")
        and any(
            (gvk["group"], gvk["version"]) in SERVED
            for gvk in schema.get("x-kubernetes-group-version-kind", [])
        )
    ]
    keep, stack = set(), roots + EXTRA
    while stack:
        name = stack.pop()
        if name not in keep:
            keep.add(name)
            stack += re.findall(r'"#/definitions/([^"]+)"', json.dumps(definitions[name]))

    add_twins(definitions, keep)

    parameters = {}
    for ours, (path, method) in OPERATIONS.items():
        params = [resolve(p) for p in swagger["paths"][path][method].get("parameters", [])]
        parameters[ours] = [p for p in params if p["in"] == "query"]
    item = swagger["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]
    for param in map(resolve, item["parameters"]):
        if param["name"] in ("namespace", "pretty"):
            parameters[param["name"]] = param

    dump = lambda value: json.dumps(value, sort_keys=True, ensure_ascii=False)
    out = sys.stdout
    out.write("{\n")
    out.write('"release": %s,\n' % dump(sys.argv[2]))
    out.write('"parameters": {\n')
    out.write(",\n".join("%s: %s" % (dump(k), dump(v)) for k, v in sorted(parameters.items())))
    out.write("\n},\n")
    out.write('"definitions": {\n')
    out.write(",\n".join("%s: %s" % (dump(n), dump(definitions[n])) for n in sorted(keep)))
    out.write("\n}\n}\n")


if __name__ == "__main__":
    main()
