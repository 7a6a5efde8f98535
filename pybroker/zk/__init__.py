"""ZooKeeper as Kafka lays it out (Kafka's ``kafka.zk``): the znode paths and their codecs (``paths``), kazoo
behind an asyncio face (``client``) and the one event queue its watches feed (``events``).

Below the controller, the server and the command-line tools (``pybroker topics --zookeeper``), above
``pybroker.common`` only.
"""
