Feature: Embeddings
  An embeddings tier answers through the gateway with one vector for each input.

  @tier
  Scenario: Every embeddings tier gives one vector per input through the gateway, the same for the same text
    Given the cluster file
    Then every embeddings tier answers three inputs through the gateway with three vectors of its model's width, the first and the last alike
