# One `cellvm serve` per KVM client node, run by Nomad (a system job).
# Never run on a Nomad cluster here; deploy/nomad_test.go parses it with
# HashiCorp's HCL and checks its names against nomad/api's types (see
# deploy/README.md). Clients need raw_exec enabled (plugin "raw_exec" {
# config { enabled = true } }), /dev/kvm, and the meta key cellvm_kvm = "true".
job "cellvm" {
  type        = "system"
  datacenters = ["dc1"]

  constraint {
    attribute = "${meta.cellvm_kvm}"
    value     = "true"
  }

  group "cellvm" {
    network {
      port "api" { static = 8443 }
    }

    service {
      name     = "cellvm"
      port     = "api"
      provider = "nomad"
      # The router reads the node name from each sandbox id (sb-NODE-...).
      tags = ["node-${node.unique.name}"]
      check {
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "serve" {
      # The daemon needs root (TAPs, iptables, the VMM jail), so it runs
      # as a host process, not in a container.
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/cellvm"
        args = [
          "serve",
          "--socket", "/run/cellvm/cellvm.sock",
          "--state-dir", "/var/lib/cellvm",
          "--kernel", "/usr/local/lib/cellvm/vmlinux",
          "--initrd", "/usr/local/lib/cellvm/initramfs.cpio",
          "--rootfs", "/usr/local/lib/cellvm/rootfs.ext4",
          "--listen", "tcp://${NOMAD_IP_api}:8443",
          "--token-file", "${NOMAD_SECRETS_DIR}/tokens",
          "--node", "${node.unique.name}",
          "--mcp",
        ]
      }

      template {
        destination = "${NOMAD_SECRETS_DIR}/tokens"
        perms       = "0400"
        data        = "{{ with nomadVar \"nomad/jobs/cellvm\" }}{{ .tokens }}{{ end }}"
      }

      # SIGTERM: the daemon destroys its sandboxes; give it the time. A
      # client caps kill_timeout at its max_kill_timeout (default 30s):
      # raise both together if a node's sandboxes need longer.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
