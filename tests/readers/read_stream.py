"""Read a DynamoDB table's stream (DynamoDB Local) from its start and print its records as the
Lambda event source mapping delivers them to a function, as one JSON object on stdout:
{"Records": [...]}, in stream order per shard.

Usage: read_stream.py TABLE
The endpoint comes from AWS_ENDPOINT_URL_DYNAMODB (with the access key and region of the
environment). Only boto3 is needed (the local stack's virtualenv has it).
"""
import json
import os
import sys

import boto3


def main():
    table = sys.argv[1]
    endpoint = os.environ["AWS_ENDPOINT_URL_DYNAMODB"]
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    ddb = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region)
    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint, region_name=region)
    arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    description = streams.describe_stream(StreamArn=arn)["StreamDescription"]
    out = []
    for shard in description["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        empty = 0
        while iterator and empty < 2:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            records = page.get("Records", [])
            empty = empty + 1 if not records else 0
            for r in records:
                change = r["dynamodb"]
                change["ApproximateCreationDateTime"] = int(
                    change["ApproximateCreationDateTime"].timestamp()
                )
                out.append({
                    "eventID": r["eventID"],
                    "eventName": r["eventName"],
                    "eventVersion": r["eventVersion"],
                    "eventSource": r["eventSource"],
                    "awsRegion": r["awsRegion"],
                    "dynamodb": change,
                    "eventSourceARN": arn,
                })
            iterator = page.get("NextShardIterator")
    print(json.dumps({"Records": out}))


if __name__ == "__main__":
    main()
