Feature: Monitoring
  Prometheus watches every node and tier between verify runs; its alerts follow the targets.

  Scenario: Prometheus scrapes every node exporter and every tier
    Given the cluster file
    Then every node exporter and every RPC tier's server is up in Prometheus

  Scenario: llama-server's token counters advance during a generation
    Given the cluster file
    When the first RPC tier generates 32 tokens
    Then Prometheus sees that tier's generated-token counter grow by at least 32

  @disruptive
  Scenario: A tier that stays down fires its alert, which resolves once it is back
    Given the cluster file
    When the first RPC tier is stopped until its tier-down alert fires
    Then the alert fired once its for window had passed, and resolves after the tier is deployed again
