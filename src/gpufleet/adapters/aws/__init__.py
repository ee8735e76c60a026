"""The AWS world behind the provider port (boto3): capacity reservations, Capacity Blocks, Service Quotas,
prices and instances. Adapters observe and act; every decision stays in the decision packages."""
