from stretto.console import main

main()
