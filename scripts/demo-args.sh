# The demo audit's arguments (sourced by run-demo-audit.sh and test.sh): two requests on
# the bundled demo checkpoint, with layer 2 storing layer 1's K/V and the second request
# overwriting the first one's cache row when it arrives at tick 3.
DEMO_ARGS=(--prompt "The cache must hold exactly one record per layer and position."
           --prompt "A second request arrives."
           --arrival 0 --arrival 3 --max-new 12
           --fault wrong_layer:layer=2,source=1
           --fault cross_request:request=1,victim=0)
