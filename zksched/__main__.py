from zksched.cli.main import main

main()
