"""The hostile suite: requests grouped by attacker, each answered by the chart's admission
policies (``model.answer``), and gpuguard's own requests, every opt-in shape included,
admitted. Every case is a complete request a real API server can be sent."""
