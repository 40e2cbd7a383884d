Feature: Model router
  The selector script on the nodes maps every task type to the configured model and endpoint.

  @router
  Scenario: Every task type maps to its model and endpoint
    Given the cluster file
    Then on every node that has the selector, every task maps to the configured model and endpoint
