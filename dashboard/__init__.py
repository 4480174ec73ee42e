"""mqdashboard: a web console for trio-rocketmq (``mqdashboard -n NS``)."""
