Feature: GPUs
  Every GPU of a tier is busy during generation and its memory stays within the target.

  Scenario: GPU utilisation and memory during generation
    Given the cluster file
    When each tier with GPU targets generates tokens while its GPUs are sampled
    Then every GPU's utilisation is at or above the tier's target
    And every GPU's memory is at or below the tier's target
