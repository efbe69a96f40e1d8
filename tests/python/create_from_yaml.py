"""Creates the objects of a multi-document YAML file with the python `kubernetes` client's
`utils.create_from_yaml`, then reads them back with the typed APIs and prints what it found
as one JSON object (the Rust test in tests/tests/kubectl_apply.rs asserts on it).

Usage: create_from_yaml.py KUBECONFIG MANIFEST NAMESPACE
"""

import json
import sys

from kubernetes import client, config, utils


def main() -> int:
    kubeconfig, manifest, namespace = sys.argv[1:4]
    config.load_kube_config(config_file=kubeconfig)
    api = client.ApiClient()

    created = utils.create_from_yaml(api, manifest, namespace=namespace)
    kinds = sorted(obj.kind for group in created for obj in group)

    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    deployment = apps.read_namespaced_deployment("py-web", namespace)
    service = core.read_namespaced_service("py-web", namespace)
    config_map = core.read_namespaced_config_map("py-config", namespace)
    deployments = apps.list_namespaced_deployment(namespace, label_selector="app=py-web")

    container = deployment.spec.template.spec.containers[0]
    assert deployment.metadata.uid, "the Deployment has no uid"
    assert deployment.metadata.namespace == namespace, deployment.metadata.namespace
    assert service.spec.cluster_ip, "the Service has no ClusterIP"

    print(
        json.dumps(
            {
                "created": kinds,
                "deployment": {
                    "replicas": deployment.spec.replicas,
                    "image": container.image,
                    "imagePullPolicy": container.image_pull_policy,
                    "generation": deployment.metadata.generation,
                },
                "service": {
                    "ports": [[p.port, p.protocol] for p in service.spec.ports],
                    "type": service.spec.type,
                    "clusterIP": service.spec.cluster_ip,
                },
                "configMap": config_map.data,
                "listed": [item.metadata.name for item in deployments.items],
            },
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
